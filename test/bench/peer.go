package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
	"github.com/fleetdb/fleetdb/member"
	"github.com/fleetdb/fleetdb/test/fleet"
	"github.com/fleetdb/fleetdb/test/localfleet"
)

// The peer: Open Cluster Management's work agent (open-cluster-management.io/ocm
// v1.0.0, cmd/work "work agent", built by hack/ocm.sh), the strongest peer of
// fleetdb's issue 28 runs. One agent per member, as OCM deploys it (its klusterlet
// runs the work agent in the managed cluster): it watches the ManifestWorks in
// its cluster's namespace on the hub (the namespace is the member's name) and
// applies their manifests to the member (pkg/work/spoke/controllers/
// manifestcontroller in the module, v1.0.0: manifestwork_controller.go sync
// waits for the agent's own finalizer on the ManifestWork, a hub write of its
// finalizer controller, then ensures the AppliedManifestWork in the member,
// then applies the manifests one after the other, each a read and a create
// or update). The bench writes one ManifestWork per
// member with the same objects the parallel floor applies (Secret, Service,
// CloudNativePG Cluster), relabelled like the floor's, with server-side apply
// on the hub, as a user of OCM would; it measures from that write to the
// member's watch event, like fleetdb's create call.

// floorPeerOCM is the peer's kind in the rotation of floorKinds (it is not a
// floor: ratios are to the minimal floor; the peer's own figure is shown beside).
const floorPeerOCM floorKind = "ocm"

// peerName names the peer in flags; peerTitle in reports.
const (
	peerName  = "ocm"
	peerTitle = "Open Cluster Management v1.0.0 (ManifestWork, work agent per member)"
)

// ocmFieldManager writes the bench's ManifestWorks on the hub.
const ocmFieldManager = "fleetdb-bench-ocm"

var manifestWorkGVK = schema.GroupVersionKind{Group: "work.open-cluster-management.io", Version: "v1", Kind: "ManifestWork"}

// ocmPeer is the running work agents.
type ocmPeer struct {
	dir   string
	procs []*exec.Cmd
	logs  []*os.File
}

// startPeer builds (hack/ocm.sh) and starts one OCM work agent per member:
// the ManifestWork CRD on the hub, the AppliedManifestWork CRD in every
// member, a hub namespace per member.
func (b *bench) startPeer(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, filepath.Join(b.cfg.root, "hack", "ocm.sh")).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("hack/ocm.sh: %w: %s", err, ee.Stderr)
		}
		return fmt.Errorf("hack/ocm.sh: %w", err)
	}
	p := &ocmPeer{dir: strings.TrimSpace(string(out))}
	b.peer = p
	crds := filepath.Join(p.dir, "crds")
	if err := fleet.ApplyManifests(ctx, b.driver, filepath.Join(crds, "0000_00_work.open-cluster-management.io_manifestworks.crd.yaml")); err != nil {
		return fmt.Errorf("hub: ManifestWork CRD: %w", err)
	}
	for _, m := range b.members {
		if err := fleet.ApplyManifests(ctx, b.direct[m], filepath.Join(crds, "0000_01_work.open-cluster-management.io_appliedmanifestworks.crd.yaml")); err != nil {
			return fmt.Errorf("%s: AppliedManifestWork CRD: %w", m, err)
		}
		if err := b.ensureNamespace(ctx, m); err != nil {
			return err
		}
	}
	if err := waitFor(ctx, time.Minute, "the ManifestWork CRD served", func() bool {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(manifestWorkGVK.GroupVersion().WithKind("ManifestWorkList"))
		return b.driver.List(ctx, l, client.InNamespace(b.members[0])) == nil
	}); err != nil {
		return err
	}
	for _, m := range b.members {
		logPath := filepath.Join(filepath.Dir(b.cfg.fleetDir), filepath.Base(b.cfg.fleetDir)+"-ocm-"+m+".log")
		f, err := os.Create(logPath)
		if err != nil {
			return err
		}
		kc := memberKubeconfig(b.fleet, m)
		port, err := localfleet.FreePort()
		if err != nil {
			f.Close()
			return err
		}
		// --workload-source-config is where the agent reads ManifestWorks
		// from (the "kube" source driver: the hub); --listen its metrics
		// server, one port per agent on this machine.
		cmd := exec.CommandContext(ctx, filepath.Join(p.dir, "work"), "agent",
			"--spoke-cluster-name="+m, "--hub-kubeconfig="+b.fleet.HubKubeconfig, "--workload-source-config="+b.fleet.HubKubeconfig,
			"--spoke-kubeconfig="+kc, "--kubeconfig="+kc, "--disable-leader-election", "--namespace=default",
			fmt.Sprintf("--listen=127.0.0.1:%d", port))
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			f.Close()
			return fmt.Errorf("starting the OCM work agent of %s: %w", m, err)
		}
		p.procs, p.logs = append(p.procs, cmd), append(p.logs, f)
	}
	logf("OCM work agents running (%s; logs %s-ocm-<member>.log)", p.dir, b.cfg.fleetDir)
	return nil
}

// stopPeer stops the work agents.
func (b *bench) stopPeer() {
	if b.peer == nil {
		return
	}
	for i, cmd := range b.peer.procs {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		b.peer.logs[i].Close()
	}
	b.peer = nil
}

// peerApply writes, on the hub, one ManifestWork per member of placement
// (named like the Database, in the member's namespace) with the objects the
// parallel floor applies, all members at once.
func (b *bench) peerApply(ctx context.Context, name string, placement []string, reps int32, gen int64) error {
	name = floorName(name, floorPeerOCM)
	return eachParallel(placement, func(m string) error {
		all, err := b.directObjects(name, m, reps, gen)
		if err != nil {
			return err
		}
		mw := manifestWork(m, name, floorObjects(all, floorParallel))
		if err := member.ServerSideApply(ctx, b.driver, mw, ocmFieldManager); err != nil {
			return fmt.Errorf("hub: ManifestWork %s/%s: %w", m, name, err)
		}
		return nil
	})
}

// manifestWork is the ManifestWork of objs for member m. The workload goes
// first: the agent applies the manifests one after the other in this order
// (manifestwork_reconciler.go applyManifests, v1.0.0), so the Cluster first
// is the peer's best case, as fleetdb writes a new workload first.
func manifestWork(m, name string, objs []*unstructured.Unstructured) *unstructured.Unstructured {
	var manifests, rest []any
	for _, u := range objs {
		if isWorkload(u) {
			manifests = append(manifests, u.Object)
		} else {
			rest = append(rest, u.Object)
		}
	}
	manifests = append(manifests, rest...)
	mw := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"workload": map[string]any{"manifests": manifests}},
	}}
	mw.SetGroupVersionKind(manifestWorkGVK)
	mw.SetNamespace(m)
	mw.SetName(name)
	mw.SetLabels(map[string]string{fleetv1alpha1.LabelManagedBy: directManagedBy})
	return mw
}

// peerDelete deletes the ManifestWorks (the agents delete what they
// applied) and, like the floors, the volume claims.
func (b *bench) peerDelete(ctx context.Context, name string, placement []string) error {
	name = floorName(name, floorPeerOCM)
	return eachParallel(placement, func(m string) error {
		mw := &unstructured.Unstructured{}
		mw.SetGroupVersionKind(manifestWorkGVK)
		mw.SetNamespace(m)
		mw.SetName(name)
		if err := b.driver.Delete(ctx, mw); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("hub: ManifestWork %s/%s: %w", m, name, err)
		}
		return b.direct[m].DeleteAllOf(ctx, &corev1.PersistentVolumeClaim{}, client.InNamespace(nsDirect),
			client.MatchingLabels{fleetv1alpha1.LabelDatabaseNamespace: nsDirect, fleetv1alpha1.LabelDatabaseName: name})
	})
}
