package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/clusterlab/clusterlab/kernel"
	"github.com/clusterlab/clusterlab/kernelrun"
	"github.com/clusterlab/clusterlab/proxy/kubeproxy"
	"github.com/clusterlab/clusterlab/scenario"
)

// runKernel is `run --backend kernel|both`: the scenario's traffic on the real kernel
// (package kernelrun), and with both also in the simulation, compared step by step.
// What the run cannot do here (not root, a mode's tool or kernel module missing) is a
// usage error naming it, before anything is made. Ctrl-C and SIGTERM end the run
// between steps and remove its namespaces.
func runKernel(cmd *cobra.Command, s *scenario.Scenario, o *runOptions) error {
	mode := o.mode
	if mode == "" {
		mode = s.Cluster.Proxy.Mode
	}
	if err := kernelrun.Supported(kubeproxy.Mode(mode), kernel.Backend(o.iptables)); err != nil {
		return badInput(fmt.Errorf("--backend %s: %w", o.backend, err))
	}
	ctx, stop := signal.NotifyContext(cmdContext(cmd), os.Interrupt, syscall.SIGTERM)
	defer stop()
	prog := newProgress(cmd.ErrOrStderr(), o.progress)
	out := cmd.OutOrStdout()
	dp := kernelrun.New(kernelrun.Options{Prefix: o.prefix, Backend: kernel.Backend(o.iptables)})
	defer dp.Close()
	kopts := scenario.Options{Mode: o.mode, Datapath: dp, DatapathState: o.backend == "both"}
	kopts.Progress = func(i, n int, title string) { prog.step(i, n, "kernel: "+title) }
	if o.backend == "kernel" {
		rep, err := scenario.Run(ctx, s, kopts)
		prog.done()
		if cerr := dp.Close(); cerr != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "clusterlab: removing the run's namespaces: %v\n", cerr)
		}
		if err != nil {
			return interrupted(ctx, err)
		}
		if err := writeResult(out, o.output, rep.JSON, rep.WriteText); err != nil {
			return err
		}
		if !rep.Passed {
			return fmt.Errorf("scenario failed on the kernel: %d of %d steps", rep.Failed, len(rep.Steps))
		}
		return nil
	}
	sopts := scenario.Options{Mode: o.mode}
	sopts.Progress = func(i, n int, title string) { prog.step(i, n, "sim: "+title) }
	sim, err := scenario.Run(ctx, s, sopts)
	if err != nil {
		prog.done()
		return interrupted(ctx, err)
	}
	kern, err := scenario.Run(ctx, s, kopts)
	prog.done()
	if cerr := dp.Close(); cerr != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "clusterlab: removing the run's namespaces: %v\n", cerr)
	}
	if err != nil {
		return interrupted(ctx, err)
	}
	cmp := scenario.CompareBackends(sim, kern, kernelrun.Explain(sim, kern))
	if o.keep != "" {
		if err := keepStates(o.keep, cmp); err != nil {
			return err
		}
	}
	if err := writeResult(out, o.output, cmp.JSON, cmp.WriteText); err != nil {
		return err
	}
	if !cmp.Passed {
		return errors.New("scenario failed on at least one back end")
	}
	return nil
}

// interrupted turns the error of a run that a signal ended into one saying so.
func interrupted(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errors.New("interrupted: the run stopped and its network namespaces are removed")
	}
	return scenarioErr(err)
}

// keepStates writes each differing step's kernel state as DIR/step-N-NODE.rules,
// .conntrack and .counters (the namespaces' nonzero packet counters; written when the
// back end gave them).
func keepStates(dir string, cmp *scenario.Comparison) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, d := range cmp.Differences {
		for _, ns := range d.DatapathState {
			base := filepath.Join(dir, fmt.Sprintf("step-%d-%s", d.Index, ns.Node))
			if err := os.WriteFile(base+".rules", []byte(ns.Rules), 0o644); err != nil {
				return err
			}
			if err := os.WriteFile(base+".conntrack", []byte(ns.Conntrack), 0o644); err != nil {
				return err
			}
			if ns.Counters != "" {
				if err := os.WriteFile(base+".counters", []byte(ns.Counters), 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
