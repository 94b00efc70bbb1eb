package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// Workload steps and faults, as named in the report.
const (
	StepCreate    = "create burst"
	StepUpdate    = "spec updates"
	StepDelete    = "deletions"
	StepPlacement = "placement changes"
	StepFreeze    = "member frozen"

	FaultSIGKILL    = "hub SIGKILL"
	FaultSIGTERM    = "hub SIGTERM"
	FaultDoubleKill = "hub killed again while starting"
	FaultFreeze     = "member kube-apiserver frozen (SIGSTOP)"
)

// action is one write to the hub, planned from the seed and run later.
type action struct {
	what string
	run  func(ctx context.Context) error
	// gap is the pause before the next write (0-600 ms): the writes of a
	// step spread over the hub's kill, downtime and restart.
	gap time.Duration
}

// runCycle plans a step, runs it while the hub is killed and restarted,
// then waits for the fleet to converge and checks it.
func (r *runner) runCycle(ctx context.Context) error {
	start := time.Now()
	step, frozen, actions := r.plan()
	for i := range actions {
		actions[i].gap = time.Duration(r.rng.Int64N(int64(600 * time.Millisecond)))
	}
	r.cur = step
	r.rep.Steps[step]++
	// Mostly early, while the writes still go in (a quadratic spread over 0-3 s).
	u := r.rng.Float64()
	killAfter := time.Duration(u * u * float64(3*time.Second))
	sigterm := r.rng.IntN(5) == 0
	downtime := time.Duration(r.rng.Int64N(int64(time.Second)))
	again := r.rng.IntN(6) == 0
	againAfter := time.Duration(r.rng.Int64N(int64(2 * time.Second)))
	r.logf("seed %d cycle %d: %s (%d writes)%s, kill after %s", r.seed, r.cycle, step, len(actions), map[bool]string{true: ", " + frozen + " frozen", false: ""}[frozen != ""], killAfter.Round(time.Millisecond))

	r.flaps.take() // what came before the cycle is not the cycle's
	if frozen != "" {
		if err := r.fleet.FreezeMember(frozen); err != nil {
			return err
		}
		r.rep.Faults[FaultFreeze]++
	}
	done := make(chan error, 1)
	go func() { done <- runActions(ctx, actions) }()

	if err := sleep(ctx, killAfter); err != nil {
		return err
	}
	r.stopHub(sigterm)
	if err := sleep(ctx, downtime); err != nil {
		return err
	}
	if err := r.startHub(ctx); err != nil {
		return err
	}
	if again {
		if err := sleep(ctx, againAfter); err != nil {
			return err
		}
		_ = r.hub.Kill() // a hub that exited already is fine: the cycle restarts it
		r.rep.Faults[FaultDoubleKill]++
		if err := r.startHub(ctx); err != nil {
			return err
		}
	}
	if err := <-done; err != nil {
		return fmt.Errorf("%s: %w", step, err)
	}
	if frozen != "" {
		// Frozen a little longer than the hub's probe grace period: the
		// member turns unreachable while the new hub runs.
		if err := sleep(ctx, 4*time.Second); err != nil {
			return err
		}
		if err := r.fleet.ThawMember(frozen); err != nil {
			return err
		}
	}
	converged := time.Now()
	err := r.converge(ctx)
	r.flapFindings(frozen)
	r.rep.cycleDone(r.seed, r.cycle, step, time.Since(start), time.Since(converged))
	if err != nil && !errors.Is(err, errConverge) {
		return err
	}
	return nil
}

// flapFindings turns the Ready flaps of the cycle into findings, but for
// Databases placed on the member the cycle froze (they are rightly
// Degraded while it answers nothing).
func (r *runner) flapFindings(frozen string) {
	flaps := r.flaps.take()
	for _, name := range slices.Sorted(maps.Keys(flaps)) {
		info := r.model.live[name]
		if info == nil || (frozen != "" && slices.Contains(info.placement, frozen)) {
			continue
		}
		r.rep.finding(Finding{Cycle: r.cycle, Seed: r.seed, Step: r.cur, Invariant: InvNoFlap,
			Message: fmt.Sprintf("%s was Ready and turned %s, its generation unchanged", name, flaps[name])})
	}
}

func (r *runner) stopHub(sigterm bool) {
	if sigterm {
		r.hub.Stop()
		r.rep.Faults[FaultSIGTERM]++
		return
	}
	_ = r.hub.Kill() // a hub that exited already is fine: the cycle restarts it
	r.rep.Faults[FaultSIGKILL]++
}

// runActions runs the actions one after the other, a few milliseconds apart.
func runActions(ctx context.Context, actions []action) error {
	for _, a := range actions {
		if err := a.run(ctx); err != nil {
			return fmt.Errorf("%s: %w", a.what, err)
		}
		if err := sleep(ctx, a.gap); err != nil {
			return err
		}
	}
	return nil
}

// plan picks the cycle's step from the seed and returns its writes; frozen
// names the member to freeze meanwhile (a "member frozen" step runs one of
// the other steps with it). The model is updated as if every write
// succeeded (runActions fails the run otherwise).
func (r *runner) plan() (step, frozen string, actions []action) {
	live := slices.Sorted(maps.Keys(r.model.live))
	switch {
	case len(live) == 0:
		step = StepCreate
	case len(live) >= r.cfg.MaxLive:
		// Full: anything but a create.
		step = oneOf(r, StepUpdate, StepDelete, StepDelete, StepPlacement, StepPlacement, StepFreeze)
	default:
		step = oneOf(r, StepCreate, StepCreate, StepUpdate, StepUpdate, StepDelete, StepPlacement, StepPlacement, StepFreeze)
	}
	work := step
	if step == StepFreeze {
		frozen = r.members[r.rng.IntN(len(r.members))]
		work = oneOf(r, StepCreate, StepUpdate, StepDelete, StepPlacement)
		if work == StepCreate && len(live) >= r.cfg.MaxLive {
			work = StepDelete
		}
		if len(live) < 2 {
			work = StepCreate
		}
	}
	switch work {
	case StepCreate:
		actions = r.planCreate()
	case StepUpdate:
		actions = r.planUpdate(live)
	case StepDelete:
		actions = r.planDelete(live)
	case StepPlacement:
		actions = r.planPlacement(live)
	}
	return step, frozen, actions
}

// pick chooses n distinct elements of s.
func (r *runner) pick(s []string, n int) []string {
	s = slices.Clone(s)
	r.rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	return s[:min(n, len(s))]
}

// subset is a random non-empty subset of the members, in member order.
func (r *runner) subset(avoid map[string]bool) []string {
	for {
		var out []string
		for _, m := range r.members {
			if !avoid[m] && r.rng.IntN(2) == 0 {
				out = append(out, m)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
}

func oneOf[T any](r *runner, v ...T) T { return v[r.rng.IntN(len(v))] }

func (r *runner) planCreate() []action {
	n := 1 + r.rng.IntN(6)
	var out []action
	for range n {
		r.model.seq++
		info := &dbInfo{
			name:       fmt.Sprintf("db-%04d", r.model.seq),
			backend:    oneOf(r, fleetv1alpha1.BackendCloudNativePG, fleetv1alpha1.BackendStatefulSet),
			placement:  r.subset(nil),
			policy:     oneOf(r, fleetv1alpha1.DeletionPolicyDelete, fleetv1alpha1.DeletionPolicyRetain, fleetv1alpha1.DeletionPolicyOrphan),
			onRemoval:  oneOf(r, fleetv1alpha1.PlacementRemovalRetain, fleetv1alpha1.PlacementRemovalDelete),
			final:      fleetv1alpha1.FinalBackupSkip,
			retainedOn: map[string]bool{},
		}
		if info.policy == fleetv1alpha1.DeletionPolicyDelete && r.rng.IntN(4) == 0 {
			info.final = fleetv1alpha1.FinalBackupRequired // kwok completes the backup Jobs
		}
		db := newDatabase(info)
		if info.backend == fleetv1alpha1.BackendCloudNativePG {
			db.Spec.Replicas = int32(1 + r.rng.IntN(3))
		}
		r.model.live[info.name] = info
		out = append(out, action{what: "create " + info.name, run: func(ctx context.Context) error {
			err := r.hubC.Create(ctx, db.DeepCopy())
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		}})
	}
	return out
}

func newDatabase(info *dbInfo) *fleetv1alpha1.Database {
	return &fleetv1alpha1.Database{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: info.name},
		Spec: fleetv1alpha1.DatabaseSpec{
			Engine:   fleetv1alpha1.EnginePostgres,
			Backend:  info.backend,
			Version:  "17",
			Replicas: 1,
			Storage:  fleetv1alpha1.StorageSpec{Size: resource.MustParse("1Gi")},
			Resources: &fleetv1alpha1.ResourceSpec{Requests: &fleetv1alpha1.ComputeResources{
				CPU: ptr.To(resource.MustParse("10m")), Memory: ptr.To(resource.MustParse("32Mi")),
			}},
			Placement:      fleetv1alpha1.PlacementSpec{ClusterNames: slices.Clone(info.placement)},
			Rollout:        fleetv1alpha1.RolloutSpec{MaxUnavailable: 1},
			DeletionPolicy: info.policy,
			// Spelled out: a Go client sends "0s" for an unset timeout.
			Teardown: fleetv1alpha1.TeardownSpec{
				UnreachableTimeout: &metav1.Duration{Duration: 10 * time.Minute},
				OnPlacementRemoval: info.onRemoval,
			},
			Backup: &fleetv1alpha1.BackupSpec{FinalBackup: info.final},
		},
	}
}

// update changes the Database name with mutate, retrying on conflicts (the
// hub writes finalizers and status meanwhile).
func (r *runner) update(ctx context.Context, name string, mutate func(*fleetv1alpha1.Database)) error {
	return retry.OnError(wait.Backoff{Steps: 20, Duration: 100 * time.Millisecond, Factor: 1.5, Cap: 2 * time.Second},
		func(err error) bool {
			return apierrors.IsConflict(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err)
		},
		func() error {
			db := &fleetv1alpha1.Database{}
			if err := r.hubC.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: name}, db); err != nil {
				return err
			}
			mutate(db)
			return r.hubC.Update(ctx, db)
		})
}

func (r *runner) planUpdate(live []string) []action {
	var out []action
	for _, name := range r.pick(live, 1+r.rng.IntN(3)) {
		info := r.model.live[name]
		var mutate func(*fleetv1alpha1.Database)
		switch k := r.rng.IntN(3); {
		case k == 0 && info.backend == fleetv1alpha1.BackendCloudNativePG:
			n := int32(1 + r.rng.IntN(3))
			mutate = func(db *fleetv1alpha1.Database) { db.Spec.Replicas = n }
		case k == 1:
			// A minor change within the major the Database was created
			// on: the API refuses a major downgrade (and any major change
			// on the StatefulSet backend).
			v := oneOf(r, "17", "17.10")
			mutate = func(db *fleetv1alpha1.Database) { db.Spec.Version = v }
		default:
			tick, cpu := strconv.Itoa(r.cycle), resource.MustParse(strconv.Itoa(10+r.rng.IntN(5))+"m")
			mutate = func(db *fleetv1alpha1.Database) {
				if db.Labels == nil {
					db.Labels = map[string]string{}
				}
				db.Labels["chaos/cycle"] = tick
				db.Spec.Resources.Requests.CPU = ptr.To(cpu)
			}
		}
		out = append(out, action{what: "update " + name, run: func(ctx context.Context) error { return r.update(ctx, name, mutate) }})
	}
	return out
}

func (r *runner) planDelete(live []string) []action {
	var out []action
	for _, name := range r.pick(live, 1+r.rng.IntN(2)) {
		info := r.model.live[name]
		// Sometimes the policy changes right before the deletion: the
		// teardown must act on the last policy.
		var switchTo fleetv1alpha1.DeletionPolicy
		if r.rng.IntN(4) == 0 {
			switchTo = oneOf(r, fleetv1alpha1.DeletionPolicyDelete, fleetv1alpha1.DeletionPolicyRetain, fleetv1alpha1.DeletionPolicyOrphan)
			info.policy = switchTo
		}
		delete(r.model.live, name)
		r.model.gone[name] = info
		for _, m := range info.placement {
			if info.final == fleetv1alpha1.FinalBackupRequired && len(r.model.snap[name][m]) > 0 {
				r.model.backupClaims = append(r.model.backupClaims, objRef{Member: m, Kind: "PersistentVolumeClaim", Name: name + "-backups"})
			}
			r.model.release(info, m, info.policy, "deletionPolicy "+string(info.policy)+" of "+name)
		}
		out = append(out, action{what: "delete " + name, run: func(ctx context.Context) error {
			if switchTo != "" {
				if err := r.update(ctx, name, func(db *fleetv1alpha1.Database) { db.Spec.DeletionPolicy = switchTo }); err != nil {
					return err
				}
			}
			err := r.hubC.Delete(ctx, &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name}})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}})
	}
	return out
}

func (r *runner) planPlacement(live []string) []action {
	var out []action
	for _, name := range r.pick(live, 1+r.rng.IntN(2)) {
		info := r.model.live[name]
		avoid := map[string]bool{}
		if info.backend == fleetv1alpha1.BackendStatefulSet {
			avoid = info.retainedOn
		}
		if len(avoid) == len(r.members) {
			continue
		}
		next := r.subset(avoid)
		if slices.Equal(next, info.placement) {
			continue
		}
		policy := fleetv1alpha1.DeletionPolicyRetain
		if info.onRemoval == fleetv1alpha1.PlacementRemovalDelete {
			policy = fleetv1alpha1.DeletionPolicyDelete
		}
		for _, m := range info.placement {
			if !slices.Contains(next, m) {
				r.model.release(info, m, policy, "onPlacementRemoval "+string(info.onRemoval)+" of "+name)
				if policy == fleetv1alpha1.DeletionPolicyRetain {
					info.retainedOn[m] = true
				}
			}
		}
		info.placement = next
		out = append(out, action{what: "place " + name, run: func(ctx context.Context) error {
			return r.update(ctx, name, func(db *fleetv1alpha1.Database) { db.Spec.Placement.ClusterNames = slices.Clone(next) })
		}})
	}
	return out
}
