package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TopologyMode says how the members' databases relate to each other.
// +kubebuilder:validation:Enum=Independent;PrimaryStandby
type TopologyMode string

// Topology modes.
const (
	// TopologyIndependent runs one independent database in every member
	// (the default, and the only mode before topologies existed).
	TopologyIndependent TopologyMode = "Independent"
	// TopologyPrimaryStandby runs one database across the members: the
	// primary member takes writes, every other member holds a CloudNativePG
	// replica cluster that streams from it (CloudNativePG backend only).
	TopologyPrimaryStandby TopologyMode = "PrimaryStandby"
)

// TopologyDurability says when the primary of a PrimaryStandby Database
// acknowledges a commit.
// +kubebuilder:validation:Enum=Synchronous;Asynchronous
type TopologyDurability string

// Durability levels.
const (
	// DurabilitySynchronous (the default): a commit on the primary is
	// acknowledged only once the standby of every other member (those
	// fenced by a forced failover left out) has flushed it (CloudNativePG
	// spec.postgresql.synchronous, method any, number = the number of those
	// standbys, named, dataDurability required). A planned switchover and a
	// forced failover to any standby lose no acknowledged transaction, and
	// an old primary that comes back after a forced failover cannot
	// acknowledge a write: every commit there waits for a standby that no
	// longer follows it until CloudNativePG demotes it. The price: each
	// commit waits for the slowest cross-member round trip, and while any
	// other member's standby does not stream, commits on the primary wait
	// (they are not refused: they finish when it is back, or once a lost
	// standby member is taken out of the placement).
	DurabilitySynchronous TopologyDurability = "Synchronous"
	// DurabilityAsynchronous: the primary acknowledges a commit once it is
	// flushed locally. Commits never wait for another member; a forced
	// failover loses what had not streamed, and an old primary that comes
	// back acknowledges writes until CloudNativePG demotes it (seconds).
	DurabilityAsynchronous TopologyDurability = "Asynchronous"
)

// TopologySpec says whether the members run one database (PrimaryStandby)
// or one database each (Independent).
//
// Changing primaryCluster of a Stable PrimaryStandby Database runs a
// switchover: the hub demotes the old primary, waits for its demotion token,
// promotes the new primary with it (no transaction lost), then re-points the
// other standbys. The hub never fails over on its own: when the primary member
// is lost, a person sets failover.targetCluster (and primaryCluster) to the
// standby to promote; see FailoverSpec.
//
// +kubebuilder:validation:XValidation:rule="self.mode != 'PrimaryStandby' || (has(self.primaryCluster) && size(self.primaryCluster) > 0)",message="spec.topology.primaryCluster is required when mode is PrimaryStandby"
// +kubebuilder:validation:XValidation:rule="self.mode == 'PrimaryStandby' || (!has(self.primaryCluster) && !has(self.failover))",message="spec.topology.primaryCluster and failover apply only to mode PrimaryStandby"
// +kubebuilder:validation:XValidation:rule="self.mode == 'PrimaryStandby' || !has(self.durability)",message="spec.topology.durability applies only to mode PrimaryStandby"
// +kubebuilder:validation:XValidation:rule="self.mode == 'PrimaryStandby' || !has(self.link)",message="spec.topology.link applies only to mode PrimaryStandby"
// +kubebuilder:validation:XValidation:rule="!has(self.failover) || self.failover.targetCluster == self.primaryCluster",message="spec.topology.failover.targetCluster must equal spec.topology.primaryCluster (the standby being promoted)"
type TopologySpec struct {
	// Mode is Independent (the default) or PrimaryStandby.
	// +optional
	// +kubebuilder:default=Independent
	Mode TopologyMode `json:"mode,omitempty"`

	// PrimaryCluster is the member that takes writes; it must be one of the
	// placed members (the hub stalls the Database with reason
	// PrimaryNotPlaced otherwise). Changing it runs a switchover.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	PrimaryCluster string `json:"primaryCluster,omitempty"`

	// Failover, when set, promotes failover.targetCluster (which must be
	// primaryCluster) WITHOUT the old primary's demotion token: use it only
	// when the primary member is lost. Transactions the old primary had not
	// streamed are lost. The hub fences the old primary first (it is turned
	// into a standby of the new primary the moment it is reachable again and
	// is never allowed to come back as a second primary).
	// +optional
	Failover *FailoverSpec `json:"failover,omitempty"`

	// Durability is Synchronous (the default when unset) or Asynchronous:
	// whether a commit on the primary waits until a standby in another
	// member has it. Synchronous is the safe choice: no acknowledged
	// transaction is lost in a failover, and an old primary back after a
	// forced failover acknowledges no write. With Synchronous, commits wait
	// while no other member's standby streams (see docs/topology.md,
	// "Durability"). After a forced failover the new primary commits
	// without waiting for the fenced old primary until it is back as a
	// standby. Applies to mode PrimaryStandby only.
	// +optional
	Durability TopologyDurability `json:"durability,omitempty"`

	// StepTimeout bounds each step of a switchover (demotion, promotion,
	// re-pointing). A step that does not finish in time stops the switchover
	// with the TopologyStable condition False, reason SwitchoverStepTimedOut,
	// and leaves the fleet as it is (never two primaries).
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s') && duration(self) <= duration('24h')",message="spec.topology.stepTimeout must be between 10s and 24h"
	StepTimeout *metav1.Duration `json:"stepTimeout,omitempty"`

	// Link tunes the replication connection between the members, which
	// usually crosses a WAN. Unset fields take the defaults documented on
	// each (fit for a WAN, not CloudNativePG's in-cluster ones).
	// +optional
	Link *TopologyLinkSpec `json:"link,omitempty"`
}

// TopologyLinkSpec tunes the replication connection between the members of
// a PrimaryStandby Database (rendered into every member's PostgreSQL
// parameters, applied with a reload, no restart).
type TopologyLinkSpec struct {
	// Timeout is how long a replication connection may stay silent before
	// either end drops it: PostgreSQL's wal_sender_timeout (on the primary)
	// and wal_receiver_timeout (on a standby). CloudNativePG sets 5s, meant
	// for a LAN: on a WAN five seconds of loss would drop the synchronous
	// standby, and with durability Synchronous commits then wait until it
	// has reconnected and caught up. Longer tolerates longer loss; shorter
	// notices a dead link sooner (commits wait either way: what the
	// timeout changes is how soon the standby reconnects, not whether a
	// commit waits). Default 30s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('5s') && duration(self) <= duration('10m')",message="spec.topology.link.timeout must be between 5s and 10m"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// WALKeepSize is how much WAL every member keeps for a standby that
	// fell behind (PostgreSQL's wal_keep_size): a standby disconnected for
	// longer than it takes the primary to write that much cannot catch up
	// by streaming (there are no replication slots between members). It
	// takes that much of the volume (spec.storage.size), on every member.
	// Default: a quarter of spec.storage.size, at least 512Mi
	// (CloudNativePG's own default) and at most 4Gi.
	// +optional
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('64Mi')) >= 0 && quantity(string(self)).compareTo(quantity('1Ti')) <= 0",message="spec.topology.link.walKeepSize must be between 64Mi and 1Ti"
	WALKeepSize *resource.Quantity `json:"walKeepSize,omitempty"`
}

// FailoverSpec asks for a forced promotion.
type FailoverSpec struct {
	// TargetCluster is the standby member to promote; it must equal
	// spec.topology.primaryCluster. Writing it is the explicit act that
	// accepts losing what the old primary had not streamed.
	// +required
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	TargetCluster string `json:"targetCluster"`
	// Reason is recorded in the switchover record and the Event.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason,omitempty"`
}

// TopologyPhase summarises the topology of a PrimaryStandby Database.
// +kubebuilder:validation:Enum=Stable;SwitchingOver;FailingOver;Degraded
type TopologyPhase string

// Topology phases.
const (
	// TopologyStable: the primary is spec.topology.primaryCluster and every
	// reachable standby follows it.
	TopologyStable TopologyPhase = "Stable"
	// TopologySwitchingOver: a switchover is under way (status.topology.switchover.step says where).
	TopologySwitchingOver TopologyPhase = "SwitchingOver"
	// TopologyFailingOver: a forced promotion is under way.
	TopologyFailingOver TopologyPhase = "FailingOver"
	// TopologyDegraded: the primary is unreachable or unhealthy, a step timed
	// out, or a fenced member waits to be rebuilt as a standby.
	TopologyDegraded TopologyPhase = "Degraded"
)

// MemberRole is a member's role in a PrimaryStandby topology.
// +kubebuilder:validation:Enum=Primary;Standby;Switching;Fenced
type MemberRole string

// Member roles.
const (
	// RolePrimary takes writes.
	RolePrimary MemberRole = "Primary"
	// RoleStandby streams from the primary.
	RoleStandby MemberRole = "Standby"
	// RoleSwitching is being demoted or promoted.
	RoleSwitching MemberRole = "Switching"
	// RoleFenced is an old primary replaced by a forced promotion; the hub
	// turns it into a standby of the new primary when it is reachable again.
	RoleFenced MemberRole = "Fenced"
)

// SwitchoverStep is where a switchover (or forced promotion) is.
// +kubebuilder:validation:Enum=CheckTarget;Demote;WaitDemotion;Promote;WaitPromotion;Repoint;Fence;Done;Failed
type SwitchoverStep string

// Switchover steps (CloudNativePG's replica-cluster switchover, step by step:
// docs/topology.md, "Switchover and failover").
const (
	StepCheckTarget   SwitchoverStep = "CheckTarget"
	StepDemote        SwitchoverStep = "Demote"
	StepWaitDemotion  SwitchoverStep = "WaitDemotion"
	StepPromote       SwitchoverStep = "Promote"
	StepWaitPromotion SwitchoverStep = "WaitPromotion"
	StepRepoint       SwitchoverStep = "Repoint"
	StepFence         SwitchoverStep = "Fence"
	StepDone          SwitchoverStep = "Done"
	StepFailed        SwitchoverStep = "Failed"
)

// SwitchoverKind says whether a primary change kept every transaction.
// +kubebuilder:validation:Enum=Switchover;Failover
type SwitchoverKind string

// Switchover kinds.
const (
	// SwitchoverPlanned demotes the old primary and promotes with its token: lossless.
	SwitchoverPlanned SwitchoverKind = "Switchover"
	// SwitchoverForced promotes without a token (spec.topology.failover).
	SwitchoverForced SwitchoverKind = "Failover"
)

// SwitchoverStatus is one primary change, under way or finished. It holds
// everything a hub restarted at any point needs to resume it.
type SwitchoverStatus struct {
	// Kind is Switchover or Failover.
	Kind SwitchoverKind `json:"kind"`
	// From is the member that was primary.
	// +kubebuilder:validation:MaxLength=63
	From string `json:"from"`
	// To is the member being promoted.
	// +kubebuilder:validation:MaxLength=63
	To string `json:"to"`
	// Step is the step under way (or Done / Failed).
	Step SwitchoverStep `json:"step"`
	// StepStarted is when the current step began (its StepTimeout counts from here).
	// +optional
	StepStarted *metav1.Time `json:"stepStarted,omitempty"`
	// Started is when the switchover began.
	Started metav1.Time `json:"started"`
	// Finished is when it reached Done or Failed.
	// +optional
	Finished *metav1.Time `json:"finished,omitempty"`
	// DemotionToken is the old primary's demotion token (CloudNativePG's
	// status.demotionToken: WAL position metadata, no secret), kept so a
	// promotion can resume after a hub restart.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	DemotionToken string `json:"demotionToken,omitempty"`
	// IgnoredDemotionToken is the demotion token the old primary reported
	// before this switchover demoted it (left from an earlier demotion):
	// WaitDemotion does not take it for the new one.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	IgnoredDemotionToken string `json:"ignoredDemotionToken,omitempty"`
	// Outcome is Succeeded, Failed (a step timed out; see Message), Aborted
	// (primaryCluster was set back before the promotion), or empty while
	// under way.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Outcome string `json:"outcome,omitempty"`
	// Message explains the outcome or the step that waits.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Message string `json:"message,omitempty"`
	// TraceID of the switchover's trace (the trace of its step spans), set
	// whether or not the hub exports traces.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	TraceID string `json:"traceID,omitempty"`
}

// TopologyStatus is the observed topology of a PrimaryStandby Database.
type TopologyStatus struct {
	// Mode the hub runs the Database in.
	Mode TopologyMode `json:"mode"`
	// Phase summarises the topology.
	// +optional
	Phase TopologyPhase `json:"phase,omitempty"`
	// PrimaryCluster is the member that is primary now (the one the hub last
	// promoted, or spec.topology.primaryCluster at creation).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	PrimaryCluster string `json:"primaryCluster,omitempty"`
	// Fenced lists old primaries replaced by a forced promotion that the hub
	// has not yet rebuilt as standbys.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	Fenced []string `json:"fenced,omitempty"`
	// Switchover is the primary change under way, if any.
	// +optional
	Switchover *SwitchoverStatus `json:"switchover,omitempty"`
	// LastSwitchover is the last primary change that finished.
	// +optional
	LastSwitchover *SwitchoverStatus `json:"lastSwitchover,omitempty"`
}
