package localfleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Faults for members with real nodes (hack/realnode.sh): what a user of a
// fleet meets — a cut or lossy link between two members, a frozen node or
// pod, a killed pod — made the way it happens, below Kubernetes. Each is
// undone by the function it returns, and by hack/fleet.sh down if a test
// dies in the middle of one: the rules live in the node's own network
// namespace (deleted with it) and down thaws every cgroup of a node before
// it ends its processes. Nothing is changed on the host itself.
//
// The network faults are iptables rules in the raw table of a member's node
// namespace, in a chain of their own (FaultChain) that PREROUTING and OUTPUT
// jump to first: raw comes before connection tracking, so an established
// connection is cut as well as a new one, and kube-proxy, which does not
// manage the raw table's base chains, does not reorder them. PREROUTING sees
// what the node's pods send (and, with bridge-nf-call-iptables set by
// hack/realnode.sh, what they send one another across the node's bridge) and
// what arrives from other nodes; OUTPUT what the node's own processes send.
// This kernel has no netem: there is no delay fault, only loss.

// FaultChain is the raw-table chain that holds a node's network faults.
const FaultChain = "FLEETDB-FAULTS"

// Direction says which way a network fault acts, seen from the member whose
// node holds it.
type Direction int

const (
	// Both cuts what the member sends to the peer and what it receives.
	Both Direction = iota
	// Outbound cuts what the member sends to the peer only.
	Outbound
	// Inbound cuts what the member receives from the peer only.
	Inbound
)

// Undo removes a fault.
type Undo func(ctx context.Context) error

// realNet is the real nodes' addressing of this fleet (hack/realnode.sh):
// its environment variables or their defaults.
func (f *Fleet) realNet() (nodeNet, podNet string) {
	nodeNet, podNet = "10.213", "10.214"
	for _, kv := range f.opts.ExtraEnv {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "REALNODE_NODE_NET":
			nodeNet = v
		case "REALNODE_POD_NET":
			podNet = v
		}
	}
	return nodeNet, podNet
}

// memberIndex is N of "member-N".
func memberIndex(member string) (int, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(member, "member-"))
	if err != nil || !strings.HasPrefix(member, "member-") || n < 1 || n > 200 {
		return 0, fmt.Errorf("%q is no member-N (N from 1 to 200)", member)
	}
	return n, nil
}

// NodeIP is the address of a member's real node; PodCIDR the range of its
// pods' addresses.
func (f *Fleet) NodeIP(member string) (string, error) {
	i, err := memberIndex(member)
	if err != nil {
		return "", err
	}
	nodeNet, _ := f.realNet()
	return fmt.Sprintf("%s.0.%d", nodeNet, 10+i), nil
}

// PodCIDR is the range of the addresses of a member's real node's pods.
func (f *Fleet) PodCIDR(member string) (string, error) {
	i, err := memberIndex(member)
	if err != nil {
		return "", err
	}
	_, podNet := f.realNet()
	return fmt.Sprintf("%s.%d.0/24", podNet, i), nil
}

// nodeNamespace is a member's real node's network namespace, and the name
// of its cgroup in every hierarchy.
func (f *Fleet) nodeNamespace(member string) string { return f.opts.Prefix + "-rn-" + member }

// CutMembers cuts the link between member's real node (and its pods) and
// peer's, in dir as seen from member: packets are dropped, as on a broken
// link, not refused.
func (f *Fleet) CutMembers(ctx context.Context, member, peer string, dir Direction) (Undo, error) {
	return f.dropToPeer(ctx, member, peer, dir, nil)
}

// DropBetweenMembers drops share (0 < share < 1) of the packets between
// member's real node and peer's, both ways, at random: a lossy link.
func (f *Fleet) DropBetweenMembers(ctx context.Context, member, peer string, share float64) (Undo, error) {
	if share <= 0 || share >= 1 {
		return nil, fmt.Errorf("share %v: want more than 0 and less than 1", share)
	}
	return f.dropToPeer(ctx, member, peer, Both, []string{"-m", "statistic", "--mode", "random", "--probability", strconv.FormatFloat(share, 'f', 3, 64)})
}

func (f *Fleet) dropToPeer(ctx context.Context, member, peer string, dir Direction, match []string) (Undo, error) {
	nodeIP, err := f.NodeIP(peer)
	if err != nil {
		return nil, err
	}
	pods, err := f.PodCIDR(peer)
	if err != nil {
		return nil, err
	}
	peerNets := nodeIP + "/32," + pods
	var rules [][]string
	if dir == Both || dir == Outbound {
		rules = append(rules, append([]string{"-d", peerNets}, match...))
	}
	if dir == Both || dir == Inbound {
		rules = append(rules, append([]string{"-s", peerNets}, match...))
	}
	return f.addFaultRules(ctx, member, rules)
}

// CutAddresses cuts, inside member's real node, every packet between the
// addresses a and b (a pod's or the node's), both ways: say, the
// CloudNativePG operator's pod and an instance's, so that the operator can
// no longer read the instance it manages while the instance runs on.
func (f *Fleet) CutAddresses(ctx context.Context, member, a, b string) (Undo, error) {
	return f.addFaultRules(ctx, member, [][]string{{"-s", a, "-d", b}, {"-s", b, "-d", a}})
}

// addFaultRules appends DROP rules (each a match) to member's fault chain,
// making the chain and its jumps first, and returns their removal.
func (f *Fleet) addFaultRules(ctx context.Context, member string, rules [][]string) (Undo, error) {
	if err := f.ensureFaultChain(ctx, member); err != nil {
		return nil, err
	}
	ns := f.nodeNamespace(member)
	var added [][]string
	undo := func(ctx context.Context) error {
		var errs []error
		for _, r := range added {
			if err := iptables(ctx, ns, append(append([]string{"-t", "raw", "-D", FaultChain}, r...), "-j", "DROP")...); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	for _, r := range rules {
		if err := iptables(ctx, ns, append(append([]string{"-t", "raw", "-A", FaultChain}, r...), "-j", "DROP")...); err != nil {
			return nil, errors.Join(err, undo(ctx))
		}
		added = append(added, r)
	}
	return undo, nil
}

// ensureFaultChain makes FaultChain in member's node namespace and jumps to
// it first from PREROUTING and OUTPUT, once.
func (f *Fleet) ensureFaultChain(ctx context.Context, member string) error {
	ns := f.nodeNamespace(member)
	if iptables(ctx, ns, "-t", "raw", "-n", "-L", FaultChain) != nil {
		if err := iptables(ctx, ns, "-t", "raw", "-N", FaultChain); err != nil {
			return err
		}
	}
	for _, base := range []string{"PREROUTING", "OUTPUT"} {
		if iptables(ctx, ns, "-t", "raw", "-C", base, "-j", FaultChain) == nil {
			continue
		}
		if err := iptables(ctx, ns, "-t", "raw", "-I", base, "1", "-j", FaultChain); err != nil {
			return err
		}
	}
	return nil
}

// iptables runs iptables in a network namespace, waiting for its lock (the
// node's kube-proxy takes it too), with a deadline.
func iptables(ctx context.Context, ns string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, "iptables", "-w", "5"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables %s in %s: %w: %s", strings.Join(args, " "), ns, err, bytes.TrimSpace(out))
	}
	return nil
}

// freezer is the cgroup hierarchy that has the freezer — cgroup v1's
// freezer controller where it is mounted (this host: v1 with v2 beside it),
// else the unified v2 hierarchy — with its control file and the values that
// freeze and thaw.
func freezer() (root, file, frozen, thawed string) {
	if fileExists("/sys/fs/cgroup/freezer") {
		return "/sys/fs/cgroup/freezer", "freezer.state", "FROZEN", "THAWED"
	}
	return "/sys/fs/cgroup", "cgroup.freeze", "1", "0"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// nodeCgroup is member's node cgroup in the freezer's hierarchy.
func (f *Fleet) nodeCgroup(member string) string {
	root, _, _, _ := freezer()
	return filepath.Join(root, f.nodeNamespace(member))
}

// freeze freezes the cgroup dir (member's node cgroup or one below it) and
// returns its thaw.
func freeze(dir string) (Undo, error) {
	_, file, frozen, thawed := freezer()
	path := filepath.Join(dir, file)
	if err := os.WriteFile(path, []byte(frozen), 0o644); err != nil {
		return nil, fmt.Errorf("freezing %s: %w", path, err)
	}
	return func(context.Context) error {
		if err := os.WriteFile(path, []byte(thawed), 0o644); err != nil {
			return fmt.Errorf("thawing %s: %w", path, err)
		}
		return nil
	}, nil
}

// FreezeNode freezes every process of member's real node — kubelet,
// containerd, kube-proxy and every pod's — as a node that hangs: its
// connections stay open and nothing answers. The member's control plane runs
// on (StopMember stops it).
func (f *Fleet) FreezeNode(member string) (Undo, error) { return freeze(f.nodeCgroup(member)) }

// FreezePod freezes the processes of one pod (by its UID) on member's real
// node: a hung process, while the node and its kubelet run on.
func (f *Fleet) FreezePod(member, podUID string) (Undo, error) {
	dir, err := f.podCgroup(member, podUID)
	if err != nil {
		return nil, err
	}
	return freeze(dir)
}

// KillPod sends SIGKILL to every process of one pod (by its UID) on
// member's real node, as a crash or the OOM killer would: no graceful
// shutdown, no API call; the kubelet restarts the containers as their
// restart policy says. It returns how many processes it signalled.
func (f *Fleet) KillPod(member, podUID string) (int, error) {
	dir, err := f.podCgroup(member, podUID)
	if err != nil {
		return 0, err
	}
	n := 0
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, field := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(field)
			if err != nil {
				continue
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
				n++
			}
		}
		return nil
	})
	if err == nil && n == 0 {
		err = fmt.Errorf("pod %s on %s's real node has no process", podUID, member)
	}
	return n, err
}

// podCgroup finds a pod's cgroup (the kubelet's cgroupfs layout, pod<uid>
// under kubepods, by QoS class) below member's node cgroup.
func (f *Fleet) podCgroup(member, podUID string) (string, error) {
	want := "pod" + podUID
	var found string
	_ = filepath.WalkDir(f.nodeCgroup(member), func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil //nolint:nilerr // a cgroup that went while walking is no match
		}
		if d.Name() == want {
			found = path
			return filepath.SkipAll
		}
		return nil
	})
	if found == "" {
		return "", fmt.Errorf("no cgroup of pod %s on %s's real node", podUID, member)
	}
	return found, nil
}
