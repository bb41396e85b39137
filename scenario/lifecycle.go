package scenario

// Pod lifecycle steps: evict, set_phase, set_health, and the ReplicaSet controller's
// choice of pods when a workload scales down.

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/clusterlab/clusterlab/cluster"
	"github.com/clusterlab/clusterlab/service"
	corev1 "k8s.io/api/core/v1"
)

// replaceOwned makes the pod's workload (if any) replace it, as its ReplicaSet does
// when a pod stops counting as active (deleted, or in a terminal phase); it returns a
// note for the step's details ("" without a workload).
func (r *runner) replaceOwned(p *corev1.Pod) (string, error) {
	w := r.ownerOf(p)
	if w == nil || !slices.Contains(w.pods, p.Name) {
		return "", nil // no workload, or the pod no longer counts among its replicas
	}
	w.pods = removeString(w.pods, p.Name)
	pod := w.newPod()
	if _, err := r.c.CreatePod(pod); err != nil {
		return "", fmt.Errorf("replacement for %s/%s: %w", p.Namespace, p.Name, err)
	}
	return fmt.Sprintf("ReplicaSet %s/%s replaces it with %s", w.namespace, w.rsName, r.describePod(w.namespace, pod.Name)), nil
}

func (r *runner) evictPods(a *PodAction, res *StepResult) error {
	pods, err := r.matchPods(a)
	if err != nil {
		return err
	}
	var graces []string
	for _, p := range pods {
		if err := r.c.EvictPod(p.Namespace, p.Name); err != nil {
			return err
		}
		graces = append(graces, fmt.Sprintf("%s/%s %s", p.Namespace, p.Name, cluster.TerminationGracePeriod(p)))
		note, err := r.replaceOwned(p)
		if err != nil {
			return err
		}
		if note != "" {
			res.Details = append(res.Details, note)
		}
	}
	res.Summary = "evicted " + podNames(pods) + " (terminating for their grace periods: " + strings.Join(graces, ", ") + ")"
	return nil
}

func (r *runner) setPhase(a *SetPhase, res *StepResult) error {
	pods, err := r.matchPods(&a.PodAction)
	if err != nil {
		return err
	}
	for _, p := range pods {
		if err := r.c.SetPodPhase(p.Namespace, p.Name, corev1.PodPhase(a.Phase)); err != nil {
			return err
		}
		note, err := r.replaceOwned(p)
		if err != nil {
			return err
		}
		if note != "" {
			res.Details = append(res.Details, note)
		}
	}
	res.Summary = fmt.Sprintf("%s now %s: their endpoints are gone", podNames(pods), a.Phase)
	return nil
}

func (r *runner) setHealth(a *SetHealth, res *StepResult) error {
	pods, err := r.matchPods(&a.PodAction)
	if err != nil {
		return err
	}
	h := cluster.PodHealth{HTTPStatus: a.HTTPStatus, NotListening: a.Listening != nil && !*a.Listening}
	for _, p := range pods {
		if err := r.c.SetPodHealth(p.Namespace, p.Name, h); err != nil {
			return err
		}
	}
	var what []string
	if a.HTTPStatus != 0 {
		what = append(what, fmt.Sprintf("health endpoints answer %d", a.HTTPStatus))
	}
	if h.NotListening {
		what = append(what, "servers closed")
	} else if a.Listening != nil {
		what = append(what, "servers listening")
	}
	res.Summary = podNames(pods) + ": " + strings.Join(what, ", ")
	return nil
}

// podDeletionCost is the annotation that ranks a ReplicaSet's pods for deletion.
const podDeletionCost = "controller.kubernetes.io/pod-deletion-cost"

// podsToDelete picks the n pods a scale-down deletes, as the ReplicaSet controller's
// getPodsToDelete ranks them (pkg/controller/replicaset, controller.ActivePodsWithRanks):
// unscheduled before scheduled, Pending before Running, not ready before ready, lower
// pod-deletion-cost first, more container restarts first, newer first. Not modelled:
// the rank by how many of the workload's pods share a node, and how long pods have been
// ready.
func (r *runner) podsToDelete(w *workload, n int) []string {
	type cand struct {
		name     string
		age      int // index in w.pods: higher is newer
		pod      *corev1.Pod
		cost     int
		restarts int32
	}
	var cs []cand
	for i, name := range w.pods {
		c := cand{name: name, age: i}
		if p, ok := r.c.Store().GetPod(w.namespace, name); ok {
			c.pod = p
			c.cost, _ = strconv.Atoi(p.Annotations[podDeletionCost])
			for _, st := range p.Status.ContainerStatuses {
				c.restarts += st.RestartCount
			}
		}
		cs = append(cs, c)
	}
	phaseRank := func(p *corev1.Pod) int {
		if p == nil {
			return 0
		}
		switch p.Status.Phase {
		case corev1.PodPending:
			return 0
		case corev1.PodUnknown:
			return 1
		case corev1.PodRunning:
			return 2
		}
		return 0
	}
	assigned := func(p *corev1.Pod) bool { return p != nil && p.Spec.NodeName != "" }
	ready := func(p *corev1.Pod) bool { return p != nil && service.IsPodReady(p) }
	sort.SliceStable(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		switch {
		case assigned(a.pod) != assigned(b.pod):
			return !assigned(a.pod)
		case phaseRank(a.pod) != phaseRank(b.pod):
			return phaseRank(a.pod) < phaseRank(b.pod)
		case ready(a.pod) != ready(b.pod):
			return !ready(a.pod)
		case a.cost != b.cost:
			return a.cost < b.cost
		case a.restarts != b.restarts:
			return a.restarts > b.restarts
		}
		return a.age > b.age
	})
	var out []string
	for _, c := range cs[:n] {
		out = append(out, c.name)
	}
	return out
}
