package manifests

import (
	"net/netip"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/kind/pkg/apis/config/defaults"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"
)

// kindClusters are the kind configs and the role each plays.
var kindClusters = []struct {
	file   string
	member bool
}{
	{"hub", false},
	{"member-1", true},
	{"member-2", true},
}

// loadKindConfig reads a kind config the way kind does: strict YAML into the
// public v1alpha4 types, then kind's own defaulting.
func loadKindConfig(t *testing.T, file string) v1alpha4.Cluster {
	t.Helper()
	var c v1alpha4.Cluster
	if err := yaml.UnmarshalStrict([]byte(readFile(t, "kind-configs/"+file+".yaml")), &c); err != nil {
		t.Fatalf("kind-configs/%s.yaml: %v", file, err)
	}
	v1alpha4.SetDefaultsCluster(&c)
	return c
}

// kindNodeImage is a kindest/node release of the Kubernetes minor fleetdb is
// built against, pinned by digest.
var kindNodeImage = regexp.MustCompile(`^kindest/node:v1\.36\.\d+@sha256:[0-9a-f]{64}$`)

// dockerDefaultPools are the address pools Docker takes bridge networks (and
// so kind's "kind" network) from; cluster subnets must stay out of them, or
// the nodes cannot reach each other.
var dockerDefaultPools = []netip.Prefix{netip.MustParsePrefix("172.16.0.0/12"), netip.MustParsePrefix("192.168.0.0/16")}

func TestKindConfigs(t *testing.T) {
	type subnet struct {
		owner  string
		prefix netip.Prefix
	}
	var subnets []subnet
	names, ports := map[string]string{}, map[int32]string{}

	for _, kc := range kindClusters {
		t.Run(kc.file, func(t *testing.T) {
			g := NewWithT(t)
			c := loadKindConfig(t, kc.file)
			g.Expect(c.Kind).To(Equal("Cluster"))
			g.Expect(c.APIVersion).To(Equal("kind.x-k8s.io/v1alpha4"))

			// The Makefile derives the cluster's docker name (and a member's
			// --server) from this name.
			g.Expect(c.Name).To(Equal("fleetdb-"+kc.file), "cluster name")
			g.Expect(names).NotTo(HaveKey(c.Name), "cluster name used twice")
			names[c.Name] = kc.file

			controlPlanes, workers := 0, 0
			for i, n := range c.Nodes {
				switch n.Role {
				case v1alpha4.ControlPlaneRole:
					controlPlanes++
				case v1alpha4.WorkerRole:
					workers++
				default:
					t.Errorf("node %d: unknown role %q", i, n.Role)
				}
				g.Expect(n.Image).To(MatchRegexp(kindNodeImage.String()), "node %d image", i)
				// kind publishes node images per release; the one a kind
				// release defaults to is known to work with it.
				g.Expect(n.Image).To(Equal(defaults.Image),
					"node %d: pin the default image of the kind version in go.mod (and bump both together)", i)
			}
			g.Expect(controlPlanes).To(Equal(1), "exactly one control-plane node (a second one would add a load balancer)")
			if kc.member {
				g.Expect(workers).To(BeNumerically("<=", 1), "a member has at most one worker")
			} else {
				g.Expect(workers).To(BeZero(), "the hub runs on its control-plane node alone")
			}

			net := c.Networking
			g.Expect(net.IPFamily).To(Equal(v1alpha4.IPv4Family))
			// The API server is reachable from the host only, on a port of its
			// own; the hub reaches members over the docker network instead.
			g.Expect(net.APIServerAddress).To(Equal("127.0.0.1"), "apiServerAddress: loopback only")
			g.Expect(net.APIServerPort).To(BeNumerically(">=", 1024), "a fixed, unprivileged apiServerPort")
			g.Expect(net.APIServerPort).To(BeNumerically("<=", 65535))
			g.Expect(ports).NotTo(HaveKey(net.APIServerPort), "apiServerPort used twice")
			ports[net.APIServerPort] = kc.file
			g.Expect(net.DisableDefaultCNI).To(BeFalse(), "kindnet routes the pods")

			for field, value := range map[string]string{"podSubnet": net.PodSubnet, "serviceSubnet": net.ServiceSubnet} {
				p, err := netip.ParsePrefix(value)
				g.Expect(err).NotTo(HaveOccurred(), "%s %q", field, value)
				if err != nil {
					continue
				}
				g.Expect(p).To(Equal(p.Masked()), "%s %q has host bits set", field, value)
				g.Expect(p.Addr().Is4()).To(BeTrue(), "%s %q is not IPv4", field, value)
				g.Expect(p.Bits()).To(BeNumerically("<=", 24), "%s %q is too small", field, value)
				for _, pool := range dockerDefaultPools {
					g.Expect(p.Overlaps(pool)).To(BeFalse(), "%s %q overlaps docker's address pool %s", field, value, pool)
				}
				subnets = append(subnets, subnet{owner: kc.file + " " + field, prefix: p})
			}
		})
	}

	t.Run("subnets do not overlap", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(subnets).To(HaveLen(2 * len(kindClusters)))
		for i, a := range subnets {
			for _, b := range subnets[i+1:] {
				g.Expect(a.prefix.Overlaps(b.prefix)).To(BeFalse(), "%s %s overlaps %s %s", a.owner, a.prefix, b.owner, b.prefix)
			}
		}
	})
}

// TestKindVersionsAgree keeps the kind the Makefile and CI run in step with
// the kind library these tests (and the node image pin) use.
func TestKindVersionsAgree(t *testing.T) {
	g := NewWithT(t)
	goMod := submatch(t, "go.mod", `(?m)^\s*sigs\.k8s\.io/kind (v\S+)`)
	g.Expect(submatch(t, "Makefile", `(?m)^KIND_VERSION\s*:?=\s*(\S+)\s*$`)).To(Equal(goMod), "Makefile KIND_VERSION vs go.mod")
	g.Expect(submatch(t, ".github/workflows/kind-e2e.yaml", `(?m)^\s*KIND_VERSION:\s*(\S+)\s*$`)).To(Equal(goMod), "workflow KIND_VERSION vs go.mod")
	g.Expect(strings.Contains(readFile(t, ".github/workflows/kind-e2e.yaml"), "go install sigs.k8s.io/kind@${KIND_VERSION}")).To(BeTrue(),
		"the workflow installs kind at KIND_VERSION")
}

// TestKindTargets checks the Makefile wires the kind fleet as the configs expect.
func TestKindTargets(t *testing.T) {
	g := NewWithT(t)
	mk := readFile(t, "Makefile")
	for _, target := range []string{"kind-up", "kind-load", "kind-deploy", "kind-e2e", "kind-down"} {
		g.Expect(regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(target)+`:`).MatchString(mk)).To(BeTrue(), "make target %s", target)
	}
	members := strings.Fields(submatch(t, "Makefile", `(?m)^KIND_MEMBERS\s*:?=(.*)$`))
	var want []string
	for _, kc := range kindClusters {
		if kc.member {
			want = append(want, kc.file)
		}
	}
	g.Expect(members).To(Equal(want), "KIND_MEMBERS vs kind-configs/")
	g.Expect(submatch(t, "Makefile", `(?m)^KIND_HUB\s*:?=\s*(\S+)\s*$`)).To(Equal(loadKindConfig(t, "hub").Name), "KIND_HUB is the hub's kind cluster")
	// Members are joined with the address the hub's pods reach them at.
	g.Expect(strings.Contains(mk, "--server https://$$name-control-plane:6443")).To(BeTrue(), "kind-up joins members with their in-network address")
	// The workflow runs the targets in order and always tears down.
	wf := readFile(t, ".github/workflows/kind-e2e.yaml")
	last := -1
	for _, target := range []string{"make kind-up", "make kind-load", "make kind-deploy", "make kind-e2e", "make kind-down"} {
		i := strings.Index(wf, target)
		g.Expect(i).To(BeNumerically(">", last), "workflow runs %s after the previous step", target)
		last = i
	}
	g.Expect(regexp.MustCompile(`if: always\(\)\s+run: make kind-down`).MatchString(wf)).To(BeTrue(), "kind-down runs even when a step failed")
}

func submatch(t *testing.T, file, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(readFile(t, file))
	if m == nil {
		t.Fatalf("%s: no match for %s", file, re)
	}
	return strings.TrimSpace(m[1])
}
