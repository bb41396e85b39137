package cluster

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// DefaultTerminationGracePeriod is a pod's terminationGracePeriodSeconds when it sets
// none (the API default, 30 s).
const DefaultTerminationGracePeriod = 30 * time.Second

// TerminationGracePeriod is the grace period a graceful deletion of the pod gets: its
// spec.terminationGracePeriodSeconds, or the API default of 30 s.
func TerminationGracePeriod(pod *corev1.Pod) time.Duration {
	if s := pod.Spec.TerminationGracePeriodSeconds; s != nil && *s >= 0 {
		return time.Duration(*s) * time.Second
	}
	return DefaultTerminationGracePeriod
}

// EvictPod evicts a pod as the Eviction API does (kubectl drain, the node-pressure
// eviction's API-initiated cousin): a graceful deletion with the pod's
// terminationGracePeriodSeconds, so it terminates (its endpoints terminating, still
// serving while ready) until the grace period passes on the virtual clock. There are no
// PodDisruptionBudgets in the simulation: an eviction is never refused. Replacing the
// pod is its workload's business (the scenario runner's ReplicaSets do).
func (c *Cluster) EvictPod(namespace, name string) error {
	p, ok := c.store.GetPod(namespace, name)
	if !ok {
		return fmt.Errorf("evict: no pod %s/%s", namespace, name)
	}
	return c.store.DeletePod(namespace, name, TerminationGracePeriod(p))
}

// SetPodPhase ends a running pod in a terminal phase, Succeeded (its containers exited
// 0) or Failed (one did not), as its kubelet reports it: the containers stop, the pod's
// network goes, it is not ready, and the EndpointSlice controller drops its endpoints
// (it leaves out pods in a terminal phase). The pod object stays, as in Kubernetes,
// until it is deleted.
func (c *Cluster) SetPodPhase(namespace, name string, phase corev1.PodPhase) error {
	if phase != corev1.PodSucceeded && phase != corev1.PodFailed {
		return fmt.Errorf("pod %s/%s: phase %q: want Succeeded or Failed", namespace, name, phase)
	}
	p, ok := c.store.GetPod(namespace, name)
	if !ok {
		return fmt.Errorf("no pod %s/%s", namespace, name)
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return fmt.Errorf("pod %s/%s is already %s", namespace, name, p.Status.Phase)
	}
	st := p.DeepCopy()
	st.Status.Phase = phase
	setCondition(st, corev1.ContainersReady, false)
	setCondition(st, corev1.PodReady, false)
	exit, reason := int32(0), "Completed"
	if phase == corev1.PodFailed {
		exit, reason = 1, "Error"
	}
	for _, list := range [][]corev1.ContainerStatus{st.Status.InitContainerStatuses, st.Status.ContainerStatuses} {
		for i := range list {
			list[i].Ready = false
			list[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Reason: reason}}
		}
	}
	_, err := c.store.UpdateStatus(st)
	return err
}

// SetPodHealth sets the health of a running pod's app, as its probes see it: an HTTP
// status its health endpoints answer httpGet and grpc probes with, or its servers closed
// (every probe and connection refused). A restart of a container (a liveness or startup
// probe's failure) mends it.
func (c *Cluster) SetPodHealth(namespace, name string, h PodHealth) error {
	pr := c.podRunFor(namespace, name)
	if pr == nil {
		return fmt.Errorf("no running pod %s/%s", namespace, name)
	}
	if h.HTTPStatus != 0 && (h.HTTPStatus < 100 || h.HTTPStatus > 599) {
		return fmt.Errorf("pod %s/%s: HTTP status %d: want 100-599", namespace, name, h.HTTPStatus)
	}
	c.Do(func() { pr.setHealth(h) })
	return nil
}

// ContainerState is the kubelet's view of one container of a running pod.
type ContainerState struct {
	Name         string
	Sidecar      bool // an init container with restartPolicy Always
	Running      bool
	Ready        bool
	Started      bool
	RestartCount int32
}

// PodContainers returns the containers of a running pod (sidecars first), and false if
// the kubelet runs no such pod.
func (c *Cluster) PodContainers(namespace, name string) ([]ContainerState, bool) {
	pr := c.podRunFor(namespace, name)
	if pr == nil {
		return nil, false
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	var out []ContainerState
	for _, ct := range pr.containers {
		out = append(out, ContainerState{Name: ct.name, Sidecar: ct.sidecar, Running: ct.running, Ready: ct.running && ct.ready && ct.started, Started: ct.started, RestartCount: ct.restarts})
	}
	return out, true
}
