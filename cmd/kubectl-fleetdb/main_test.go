package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"--help"}, exitOK},
		{nil, exitOK},
		{[]string{"nope"}, exitUsage},
		{[]string{"--bogus"}, exitUsage},
		{[]string{"drain"}, exitUsage},
		{[]string{"status", "a", "b"}, exitUsage},
		{[]string{"status", "-o", "xml"}, exitUsage},
		{[]string{"join"}, exitUsage},
		{[]string{"join", "Not_A_Label", "--member-kubeconfig", "x"}, exitUsage},
		{[]string{"join", "eu-1"}, exitUsage}, // no --member-kubeconfig
		{[]string{"join", "eu-1", "--member-kubeconfig", "x", "--labels", "novalue"}, exitUsage},
		{[]string{"join", "eu-1", "--member-kubeconfig", "x", "--all-namespaces", "--namespace-labels", "a=b"}, exitUsage},
		{[]string{"join", "eu-1", "--name", "eu-2", "--member-kubeconfig", "x"}, exitUsage},
		{[]string{"join", "eu-1", "--member-kubeconfig", "/does/not/exist"}, exitError},
	} {
		var out, errOut bytes.Buffer
		code := Execute(tc.args, genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
		if code != tc.code {
			t.Errorf("%v: exit %d, want %d (stderr %q)", tc.args, code, tc.code, errOut.String())
		}
	}
}

func TestParseLabels(t *testing.T) {
	g := NewWithT(t)
	m, err := parseLabels("--labels", "a=b, example.io/tier=prod,,empty=")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m).To(Equal(map[string]string{"a": "b", "example.io/tier": "prod", "empty": ""}))
	for _, bad := range []string{"novalue", "=x", "a b=c", "a=" + strings.Repeat("x", 64)} {
		_, err := parseLabels("--labels", bad)
		g.Expect(err).To(HaveOccurred(), bad)
	}
}

func TestSecondsOrDuration(t *testing.T) {
	g := NewWithT(t)
	var d secondsOrDuration
	g.Expect(d.Set("120")).To(Succeed())
	g.Expect(time.Duration(d)).To(Equal(2 * time.Minute))
	g.Expect(d.Set("90s")).To(Succeed())
	g.Expect(time.Duration(d)).To(Equal(90 * time.Second))
	g.Expect(d.Set("soon")).NotTo(Succeed())
}

// TestTableColour: colour codes wrap the text after padding, so columns
// line up the same with and without colour, and there are none without it.
func TestTableColour(t *testing.T) {
	g := NewWithT(t)
	tb := &table{header: []string{"NAME", "PHASE", "AGE"}}
	tb.add(plain("orders"), cell{text: "Ready", colour: green}, plain("5s"))
	tb.add(plain("a"), cell{text: "Degraded", colour: red}, plain("12m"))
	var mono, col bytes.Buffer
	tb.render(&mono, false)
	tb.render(&col, true)
	g.Expect(mono.String()).To(Equal("NAME     PHASE      AGE\norders   Ready      5s\na        Degraded   12m\n"))
	g.Expect(mono.String()).NotTo(ContainSubstring("\x1b"))
	g.Expect(col.String()).To(ContainSubstring(green + "Ready" + reset + "      5s"))
	stripped := strings.NewReplacer(green, "", red, "", bold, "", reset, "").Replace(col.String())
	g.Expect(stripped).To(Equal(mono.String()))
}

func TestAge(t *testing.T) {
	now := time.Now()
	for d, want := range map[time.Duration]string{5 * time.Second: "5s", 3 * time.Minute: "3m", 5 * time.Hour: "5h", 72 * time.Hour: "3d"} {
		if got := age(now.Add(-d), now); got != want {
			t.Errorf("age(%s) = %s, want %s", d, got, want)
		}
	}
	if age(time.Time{}, now) != "-" {
		t.Error("a zero time is -")
	}
}

func TestDrainPreview(t *testing.T) {
	g := NewWithT(t)
	db := func(name string, policy fleetv1alpha1.PlacementRemovalPolicy) *fleetv1alpha1.Database {
		return &fleetv1alpha1.Database{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: fleetv1alpha1.DatabaseSpec{Teardown: fleetv1alpha1.TeardownSpec{OnPlacementRemoval: policy}}}
	}
	var out bytes.Buffer
	printDrainPreview(&out, "m1", []drainImpact{
		{db: db("stays", ""), before: []string{"m1", "m2"}, after: []string{"m2"}},
		{db: db("moves", ""), before: []string{"m1"}, after: []string{"m3"}},
		{db: db("gone", fleetv1alpha1.PlacementRemovalDelete), before: []string{"m1"}},
		{db: db("primary", ""), held: true, before: []string{"m1", "m2"}, after: []string{"m1", "m2"}},
	})
	s := out.String()
	g.Expect(s).To(ContainSubstring("Draining m1 moves 3 Database(s) off it:"))
	g.Expect(s).To(ContainSubstring("ns/stays: loses m1, stays on m2;"))
	g.Expect(s).To(ContainSubstring("ns/moves: loses m1, moves to m3 (placed on m3 afterwards)"))
	g.Expect(s).To(ContainSubstring("ns/gone: loses m1 and has NO member left; data left in m1: DELETED"))
	g.Expect(s).To(ContainSubstring("Staying on m1 until switched over"))
	g.Expect(s).To(ContainSubstring("ns/primary: holds the primary"))
	out.Reset()
	printDrainPreview(&out, "m1", nil)
	g.Expect(out.String()).To(Equal("No Database is placed on m1.\n"))
}

func TestMemberKubeconfig(t *testing.T) {
	g := NewWithT(t)
	a, err := memberKubeconfig("eu-1", "https://eu-1:6443", "", []byte("tok"), []byte("ca"))
	g.Expect(err).NotTo(HaveOccurred())
	b, err := memberKubeconfig("eu-1", "https://eu-1:6443", "", []byte("tok"), []byte("ca"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(a).To(Equal(b), "the same input gives the same bytes: join run again changes nothing")
	g.Expect(string(a)).To(ContainSubstring("server: https://eu-1:6443"))
	g.Expect(string(a)).NotTo(ContainSubstring("tokenFile"))

	// The member kubeconfig's tls-server-name goes with its server: without
	// it the hub checks the member's certificate against the address.
	c, err := memberKubeconfig("eu-1", "https://10.0.0.1:6443", "api.eu-1.internal", []byte("tok"), []byte("ca"))
	g.Expect(err).NotTo(HaveOccurred())
	raw, err := clientcmd.Load(c)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(raw.Clusters["eu-1"].TLSServerName).To(Equal("api.eu-1.internal"))
	g.Expect(raw.Clusters["eu-1"].InsecureSkipTLSVerify).To(BeFalse())
	g.Expect(raw.AuthInfos).To(HaveLen(1))
	for _, u := range raw.AuthInfos {
		g.Expect(u.Token).To(Equal("tok"))
		g.Expect(u.Exec).To(BeNil())
		g.Expect(u.ClientCertificateData).To(BeEmpty())
	}
}

// TestMemberConfigNeverAnotherCluster: a member kubeconfig without a usable
// context is a usage error naming the fix, not client-go's "no
// configuration" (whose loader then falls back to the in-cluster config, so
// that join run in a Pod would act on the Pod's own cluster).
func TestMemberConfigNeverAnotherCluster(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	const base = `apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {server: "https://10.0.0.1:6443"}
users:
- name: u
  user: {token: x}
contexts:
- name: a
  context: {cluster: a, user: u}
`
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		g.Expect(os.WriteFile(p, []byte(body), 0o600)).To(Succeed())
		return p
	}
	for _, tc := range []struct{ file, context, want string }{
		{write("nocurrent", base), "", "has no current context: pass --member-context"},
		{write("empty", ""), "", "has no current context: pass --member-context"},
		{write("missing", base+"current-context: gone\n"), "", `has no context "gone"`},
		{write("flag", base), "gone", `has no context "gone"`},
	} {
		j := &joinOptions{options: &options{flags: genericclioptions.NewConfigFlags(true)}, memberKubeconfig: tc.file, memberContext: tc.context}
		_, err := j.memberConfig()
		g.Expect(err).To(MatchError(ContainSubstring(tc.want)), tc.file)
		g.Expect(errors.As(err, new(usageError))).To(BeTrue())
	}
	j := &joinOptions{options: &options{flags: genericclioptions.NewConfigFlags(true)}, memberKubeconfig: write("ok", base), memberContext: "a"}
	cfg, err := j.memberConfig()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Host).To(Equal("https://10.0.0.1:6443"))

	// A relative certificate-authority is the kubeconfig file's, as for kubectl.
	write("ca.crt", "not checked here")
	j.memberKubeconfig = write("relative", strings.Replace(base, `server: "https://10.0.0.1:6443"`, `server: "https://10.0.0.1:6443", certificate-authority: ca.crt`, 1))
	cfg, err = j.memberConfig()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.CAFile).To(Equal(filepath.Join(dir, "ca.crt")))
}

// TestNoForeignEscapeSequences: text others wrote (an Event's note, a
// member's answer in a MemberCluster message) reaches the terminal with its
// escape characters made visible; the table's own colours stay.
func TestNoForeignEscapeSequences(t *testing.T) {
	g := NewWithT(t)
	const hostile = "pwned\x1b]0;title\x07\x1b[2J\rover"
	var b bytes.Buffer
	explainEvents(escapingWriter{&b}, []eventsv1.Event{{Type: "Warning", Reason: "X\x1b[31m", Note: hostile}}, time.Now())
	g.Expect(b.String()).NotTo(ContainSubstring("\x1b"))
	g.Expect(b.String()).NotTo(ContainSubstring("\r"))
	g.Expect(b.String()).To(ContainSubstring("pwned^[]0;title"))

	b.Reset()
	tb := &table{header: []string{"NAME", "MESSAGE"}}
	tb.add(cell{text: "eu-1", colour: red}, plain(hostile))
	tb.render(&b, true)
	g.Expect(b.String()).NotTo(ContainSubstring("\x1b[2J"))
	g.Expect(b.String()).NotTo(ContainSubstring("\r"))
	g.Expect(b.String()).To(ContainSubstring(red + "eu-1" + reset))
}
