// Package clusters is fleetdb's cluster registry: a multicluster-runtime
// Provider that engages member clusters from MemberCluster objects and their
// kubeconfig Secrets on the hub, probes every member's health and writes it to
// MemberCluster.status.
//
// The shape follows multicluster-runtime's own providers (providers/kubeconfig,
// providers/clusters): an Options struct with Default* constants, New, a locked
// map of active clusters with the cancel func and a hash of their kubeconfig,
// disengaging by cancelling the cluster's context, bounded cache-sync waits.
//
// Life of a member:
//
//   - The MemberCluster controller (SetupWithManager, on the hub's local
//     manager) reads the referenced Secret. A valid kubeconfig starts a "run":
//     a context, a rest config and a prober for exactly those kubeconfig bytes.
//     The same bytes on a later pass change nothing; different bytes cancel the
//     run (disengaging the cluster) and start a new one. A missing Secret or an
//     unparsable kubeconfig cancels the run and is reported, not retried: the
//     Secret watch brings the member back when the Secret changes.
//   - Connecting happens in its own goroutine, bounded by ConnectTimeout: a
//     preflight (/readyz, /version, /api), cluster.New, the registered field
//     indexes, cluster.Start and a cache-sync wait; then the manager engages the
//     cluster. A failed connect is retried with exponential backoff through
//     RequeueAfter, and early when a probe sees the member answer again.
//   - Every run is probed each ProbeInterval (/readyz and /version). An engaged
//     member that stops answering stays engaged (its informers retry on their
//     own); it turns Ready=False only after failing for FailureGracePeriod and
//     Ready=True again on the first passing probe.
//
// Status write policy: MemberCluster.status is written only when a condition
// (status, reason, message or observedGeneration) or kubernetesVersion changes.
// lastProbeTime is the time of the probe that produced that status; it is not
// refreshed on its own, so a fleet at rest makes zero writes. The live probe
// time is in memory: Provider.Health(name).LastProbe.
package clusters
