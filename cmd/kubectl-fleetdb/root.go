package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	fleetv1alpha1 "github.com/fleetdb/fleetdb/apis/v1alpha1"
)

// FieldManager is the server-side apply field manager of join's writes.
const FieldManager = "kubectl-fleetdb"

// CordonFieldManager owns spec.unschedulable and spec.drain (cordon, drain,
// uncordon). It is not FieldManager on purpose: join applies the whole
// MemberCluster, and under the same manager a join run again would drop
// (uncordon) a cordon it did not repeat.
const CordonFieldManager = "kubectl-fleetdb-cordon"

// defaultCallTimeout bounds every API call when --request-timeout is 0 (a
// variable for tests).
var defaultCallTimeout = 30 * time.Second

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// refusedError is an error already explained on the output: exit code 1
// without a second message.
type refusedError struct{ error }

// options are what every command shares.
type options struct {
	flags   *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
	// hubNamespace holds the members' kubeconfig Secrets on the hub.
	hubNamespace string
}

// Execute runs the command line args and returns the exit code.
func Execute(args []string, streams genericiooptions.IOStreams) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := newRootCommand(streams)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var refused refusedError
	if !errors.As(err, &refused) {
		fmt.Fprintf(streams.ErrOut, "error: %v\n", err)
	}
	var usage usageError
	if errors.As(err, &usage) {
		fmt.Fprintf(streams.ErrOut, "Run '%s --help' for usage.\n", cmd.DisplayName())
		return exitUsage
	}
	return exitError
}

func newRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{flags: genericclioptions.NewConfigFlags(true), streams: streams}
	cmd := &cobra.Command{
		Use:   "kubectl-fleetdb",
		Short: "Join member clusters to a fleetdb hub; show, explain and drain the fleet",
		Long: `kubectl fleetdb works on a fleetdb hub: --kubeconfig, --context and -n select
the hub and the namespace of its Databases, as for kubectl.`,
		// kubectl runs the plugin as `kubectl fleetdb`: help says so.
		Annotations:       map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl fleetdb"},
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	o.flags.AddFlags(cmd.PersistentFlags())
	cmd.PersistentFlags().StringVar(&o.hubNamespace, "hub-namespace", "fleetdb-system",
		"the hub's own namespace, where the members' kubeconfig Secrets live")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cmd.AddCommand(
		newJoinCommand(o), newUnjoinCommand(o),
		newStatusCommand(o), newExplainCommand(o),
		newDrainCommand(o), newCordonCommand(o, true), newCordonCommand(o, false),
	)
	return cmd
}

// exactArgs is cobra.ExactArgs as a usage error.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("expected %s, got %d argument(s)", what, len(args))
		}
		return nil
	}
}

// scheme knows the built-in kinds and fleetdb's API.
var scheme = func() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := fleetv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// restConfig is the hub's REST config from the kubectl flags.
func (o *options) restConfig() (*rest.Config, error) {
	cfg, err := o.flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "kubectl-fleetdb"
	return cfg, nil
}

// hubClient is an uncached client of the hub. Its calls are bounded by
// their contexts (o.call; a rest.Config timeout would cut status --watch's
// watches), but controller-runtime's discovery of the API (the REST mapper)
// takes no context: it gets a client bounded by callTimeout, or a hub that
// accepts connections and never answers would hang the command.
func (o *options) hubClient() (client.WithWatch, error) {
	cfg, err := o.restConfig()
	if err != nil {
		return nil, err
	}
	dcfg := rest.CopyConfig(cfg)
	dcfg.Timeout = o.callTimeout()
	dclient, err := rest.HTTPClientFor(dcfg)
	if err != nil {
		return nil, err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(dcfg, dclient)
	if err != nil {
		return nil, err
	}
	return client.NewWithWatch(cfg, client.Options{Scheme: scheme, Mapper: mapper})
}

// namespace is -n, or the kubeconfig context's namespace.
func (o *options) namespace() (string, error) {
	ns, _, err := o.flags.ToRawKubeConfigLoader().Namespace()
	return ns, err
}

// callTimeout bounds one API call: --request-timeout, or 30s when it is 0.
func (o *options) callTimeout() time.Duration {
	if o.flags.Timeout != nil && *o.flags.Timeout != "" && *o.flags.Timeout != "0" {
		if d, err := time.ParseDuration(*o.flags.Timeout); err == nil && d > 0 {
			return d
		}
	}
	return defaultCallTimeout
}

// call runs fn with a context bounded by callTimeout.
func (o *options) call(ctx context.Context, fn func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, o.callTimeout())
	defer cancel()
	return fn(cctx)
}

// colour reports whether output goes to a terminal that wants colour:
// stdout is a terminal and NO_COLOR is unset.
func (o *options) colour() bool {
	if os.Getenv("NO_COLOR") != "" {
		return false
	}
	f, ok := o.streams.Out.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// isTerminal reports whether stdout is a terminal.
func (o *options) isTerminal() bool {
	f, ok := o.streams.Out.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
