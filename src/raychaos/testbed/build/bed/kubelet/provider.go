package main

// The provider of one node: virtual-kubelet's pod controller calls it with the pods bound to the
// node; it hands them to the node agent and reports the status the agent writes back.

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/log"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1listers "k8s.io/client-go/listers/core/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// How often the agent's pod table is read for status changes (the agent's own loop is 0.25 s).
const pollInterval = 500 * time.Millisecond

// A pod this node was given: the pod as the API server last handed it, and its status as the
// agent last reported it (gen is the agent's change counter for that status).
type entry struct {
	pod    *corev1.Pod
	status *corev1.PodStatus
	gen    int64
	putAt  time.Time
}

type provider struct {
	node      string
	address   string
	agent     *agentClient
	pods      corev1listers.PodLister
	startTime metav1.Time

	mu      sync.Mutex
	entries map[string]*entry // namespace/name -> entry
}

func newProvider(node, address string, agent *agentClient, pods corev1listers.PodLister) *provider {
	return &provider{node: node, address: address, agent: agent, pods: pods,
		startTime: metav1.Now(), entries: map[string]*entry{}}
}

func key(ns, name string) string { return ns + "/" + name }

func (p *provider) withStatus(e *entry) *corev1.Pod {
	pod := e.pod.DeepCopy()
	if e.status != nil {
		pod.Status = *e.status.DeepCopy()
	}
	return pod
}

// --- node.PodLifecycleHandler -------------------------------------------------------------------

func (p *provider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	return p.put(ctx, pod)
}

func (p *provider) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	return p.put(ctx, pod)
}

func (p *provider) put(ctx context.Context, pod *corev1.Pod) error {
	if err := p.agent.putPod(ctx, p.node, pod); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	k := key(pod.Namespace, pod.Name)
	e := p.entries[k]
	if e == nil || e.pod.UID != pod.UID {
		// the agent reports it Pending until its pod worker moves it; gen 0 is "never reported"
		e = &entry{status: &corev1.PodStatus{Phase: corev1.PodPending}}
		p.entries[k] = e
	}
	e.pod = pod.DeepCopy()
	e.putAt = time.Now()
	return nil
}

// DeletePod asks the agent to stop the pod within its grace period; the agent's pod worker sends
// SIGTERM, waits, kills, and reports every container terminated (a status the poll forwards).
func (p *provider) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	err := p.agent.deletePod(ctx, string(pod.UID), pod.DeletionGracePeriodSeconds)
	if isNotFound(err) {
		return errdefs.NotFoundf("pod %s/%s (%s) is not on node %s", pod.Namespace, pod.Name,
			pod.UID, p.node)
	}
	return err
}

func (p *provider) GetPod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.entries[key(ns, name)]; e != nil {
		return p.withStatus(e), nil
	}
	return nil, errdefs.NotFoundf("pod %s/%s is not on node %s", ns, name, p.node)
}

func (p *provider) GetPodStatus(ctx context.Context, ns, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods is what the agent has: the pods this node was given, and any the agent still runs
// that this process has not seen (a kubelet restarted), so the pod controller can remove those
// Kubernetes no longer has.
func (p *provider) GetPods(ctx context.Context) ([]*corev1.Pod, error) {
	rows, err := p.agent.pods(ctx, p.node)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(rows))
	for _, row := range rows {
		if e := p.entries[key(row.Namespace, row.Name)]; e != nil && string(e.pod.UID) == row.UID {
			out = append(out, p.withStatus(e))
			continue
		}
		pod := &corev1.Pod{
			TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Namespace: row.Namespace, Name: row.Name, UID: types.UID(row.UID)},
			Spec:       corev1.PodSpec{NodeName: p.node},
		}
		if st, err := p.parseStatus(row.Status); err == nil {
			pod.Status = *st
		}
		out = append(out, pod)
	}
	return out, nil
}

// --- node.PodNotifier ---------------------------------------------------------------------------

// NotifyPods polls the agent's pod table and calls notify with each pod whose status changed.
func (p *provider) NotifyPods(ctx context.Context, notify func(*corev1.Pod)) {
	go func() {
		t := time.NewTicker(pollInterval)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			changed, err := p.poll(ctx)
			if err != nil {
				if !failing {
					log.G(ctx).WithError(err).Warnf("node %s: reading the agent's pods failed", p.node)
				}
				failing = true
				continue
			}
			if failing {
				log.G(ctx).Infof("node %s: the agent answers again", p.node)
			}
			failing = false
			for _, pod := range changed {
				notify(pod)
			}
		}
	}()
}

func (p *provider) poll(ctx context.Context) ([]*corev1.Pod, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rows, err := p.agent.pods(cctx, p.node)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var changed []*corev1.Pod
	seen := map[string]bool{}
	for _, row := range rows {
		k := key(row.Namespace, row.Name)
		e := p.entries[k]
		if e == nil || string(e.pod.UID) != row.UID {
			e = p.adopt(row)
			if e == nil {
				continue
			}
		}
		seen[k] = true
		if row.Gen == e.gen {
			continue
		}
		st, err := p.parseStatus(row.Status)
		if err != nil {
			log.G(ctx).WithError(err).Errorf("node %s: the agent's status of %s is not a PodStatus", p.node, k)
			continue
		}
		e.status, e.gen = st, row.Gen
		changed = append(changed, p.withStatus(e))
	}
	for k, e := range p.entries {
		// gone from the agent (it forgets a finished pod after a while); a pod just put may not
		// be in a table read before the put
		if !seen[k] && time.Since(e.putAt) > 10*time.Second {
			delete(p.entries, k)
		}
	}
	return changed, nil
}

// adopt takes a pod the agent runs that this process was not handed (yet): a kubelet that
// restarted finds its pods again, as they are in the API (same UID), or not at all.
func (p *provider) adopt(row agentPod) *entry {
	pod, err := p.pods.Pods(row.Namespace).Get(row.Name)
	if err != nil || string(pod.UID) != row.UID {
		return nil // not in the API (the pod controller's GetPods removes it), or another pod
	}
	e := &entry{pod: pod.DeepCopy(), status: pod.Status.DeepCopy(), putAt: time.Now()}
	p.entries[key(row.Namespace, row.Name)] = e
	return e
}

// parseStatus reads the agent's status (the API's field names) and fills what the node knows.
func (p *provider) parseStatus(raw json.RawMessage) (*corev1.PodStatus, error) {
	st := &corev1.PodStatus{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, st); err != nil {
			return nil, err
		}
	}
	if st.Phase == "" {
		st.Phase = corev1.PodPending
	}
	if st.HostIP == "" {
		st.HostIP = p.address
	}
	if len(st.HostIPs) == 0 {
		st.HostIPs = []corev1.HostIP{{IP: st.HostIP}}
	}
	if st.PodIP != "" && len(st.PodIPs) == 0 {
		st.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
	}
	return st, nil
}

// --- node.NodeProvider --------------------------------------------------------------------------

// Ping is the node's heartbeat: the node is alive while its agent answers (a dead agent lets
// the lease lapse, and the node goes NotReady as a node whose kubelet died does).
func (p *provider) Ping(ctx context.Context) error {
	_, err := p.agent.pods(ctx, p.node)
	return err
}

// NotifyNodeStatus: the node's status is the one registered (capacity does not change).
func (p *provider) NotifyNodeStatus(context.Context, func(*corev1.Node)) {}

// --- what nodeutil.Provider adds: stats and metrics (nothing measured) ---------------------------

func (p *provider) GetStatsSummary(context.Context) (*statsv1alpha1.Summary, error) {
	return &statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: p.node,
		StartTime: p.startTime}}, nil
}

func (p *provider) GetMetricsResource(context.Context) ([]*dto.MetricFamily, error) {
	return nil, nil
}
