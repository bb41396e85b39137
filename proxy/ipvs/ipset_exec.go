package ipvs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// HostNamespace, as ExecIPSets.Netns, runs ipset in the caller's own network
// namespace. It is kernel.HostNamespace (which this package cannot import): the one
// value every adapter takes for "the caller's own namespace, on purpose".
const HostNamespace = "/proc/self/ns/net"

// ExecIPSets is IPSets on a real host: `ipset restore` and `ipset save` inside a named
// network namespace (as `ip netns exec NAME ipset ...`, so every command is one a
// person can paste). Unlike the emulator, ipset restore applies the lines it reads
// before a failing one.
type ExecIPSets struct {
	// Netns is a named network namespace (/run/netns/NAME), or HostNamespace for the
	// caller's own. Required: with "" every call fails and runs nothing, so that a
	// forgotten name never changes the host's sets.
	Netns string
	// run executes a command with stdin; nil means os/exec. Tests replace it.
	run func(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error)
}

var _ IPSets = (*ExecIPSets)(nil)

func (e *ExecIPSets) command(args ...string) (string, []string) {
	if e.Netns != HostNamespace {
		return "ip", append([]string{"netns", "exec", e.Netns, "ipset"}, args...)
	}
	return "ipset", args
}

func (e *ExecIPSets) exec(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	if e.Netns == "" {
		return nil, errors.New("ipset: no network namespace: give one, or HostNamespace to act on this process's own")
	}
	name, argv := e.command(args...)
	run := e.run
	if run == nil {
		run = func(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
			cmd := exec.CommandContext(ctx, name, args...)
			cmd.Stdin = bytes.NewReader(stdin)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				return nil, fmt.Errorf("%w: %s", err, strings.TrimSpace(errb.String()))
			}
			return out.Bytes(), nil
		}
	}
	out, err := run(ctx, stdin, name, argv...)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", name, strings.Join(argv, " "), err)
	}
	return out, nil
}

// RestoreIPSets implements IPSets: `ipset restore` with data on stdin.
func (e *ExecIPSets) RestoreIPSets(ctx context.Context, data []byte) error {
	_, err := e.exec(ctx, data, "restore")
	return err
}

// SaveIPSets implements IPSets: `ipset save`.
func (e *ExecIPSets) SaveIPSets(ctx context.Context) ([]byte, error) {
	return e.exec(ctx, nil, "save")
}
