package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"time"
)

// KindControl stops and starts kind member clusters by stopping and
// starting their node container (docker stop/start). Node containers are
// named "<ClusterPrefix><member>-control-plane", as kind-configs/ name them
// (fleetdb-member-1-control-plane, ...).
type KindControl struct {
	// Docker is the docker binary; default "docker".
	Docker string
	// ClusterPrefix is prepended to the member name to get the kind cluster name.
	ClusterPrefix string
	// Fleet is used to wait for a started member's API server.
	Fleet *Fleet
}

var _ MemberControl = &KindControl{}

func (k *KindControl) container(name string) string {
	return k.ClusterPrefix + name + "-control-plane"
}

func (k *KindControl) docker(ctx context.Context, args ...string) error {
	docker := k.Docker
	if docker == "" {
		docker = "docker"
	}
	if b, err := exec.CommandContext(ctx, docker, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("docker %v: %w: %s", args, err, b)
	}
	return nil
}

// StopMember stops the member's node container.
func (k *KindControl) StopMember(ctx context.Context, name string) error {
	return k.docker(ctx, "stop", k.container(name))
}

// StartMember starts the member's node container and waits until its API
// server answers /readyz.
func (k *KindControl) StartMember(ctx context.Context, name string) error {
	if err := k.docker(ctx, "start", k.container(name)); err != nil {
		return err
	}
	m := k.Fleet.Member(name)
	if m == nil {
		return fmt.Errorf("no member %s", name)
	}
	rc, err := restClientFor(m)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err := rc.Get().AbsPath("/readyz").Do(ctx).Error()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not become ready after docker start: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
