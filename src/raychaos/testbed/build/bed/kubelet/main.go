// raychaos-kubelet: the test bed's kubelet. One process registers every node of the bed's config
// with virtual-kubelet's node controller (lease, status), runs its pod controller with a
// provider of ours that hands each pod to the bed's node agent (raychaos.testbed.node.agent)
// over HTTP on a Unix socket and reports the status the agent writes back, and serves the
// kubelet API (exec, attach, containerLogs, portForward, pods) over HTTPS on the node's port,
// to callers whose client certificate the bed's kubelet CA signed (the API server's).
// The agent's routes are listed in agent.go; provider.go is the pod lifecycle, streams.go
// exec, logs and port-forward.
//
// Run: raychaos-kubelet --config kubelet.json, the JSON raychaos.testbed.bed writes:
//
//	{"kubeconfig": PATH, "agent": SOCKET, "cert": PATH, "key": PATH, "clientCA": PATH,
//	 "version": "v1.36.3-raychaos",
//	 "nodes": [{"name": N, "port": P, "address": "127.0.0.1",
//	            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110", ...},
//	            "labels": {...}, "taints": [{"key", "value", "effect"}]}]}
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/virtual-kubelet/virtual-kubelet/log"
	logruslogger "github.com/virtual-kubelet/virtual-kubelet/log/logrus"
	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

type nodeConfig struct {
	Name     string            `json:"name"`
	Port     int               `json:"port"`
	Address  string            `json:"address"`
	Capacity map[string]string `json:"capacity"`
	Labels   map[string]string `json:"labels"`
	Taints   []corev1.Taint    `json:"taints"`
}

type config struct {
	Kubeconfig string       `json:"kubeconfig"`
	Agent      string       `json:"agent"`
	Cert       string       `json:"cert"`
	Key        string       `json:"key"`
	ClientCA   string       `json:"clientCA"`
	Version    string       `json:"version"`
	Nodes      []nodeConfig `json:"nodes"`
}

func loadConfig(path string) (*config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfg config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for what, v := range map[string]string{"kubeconfig": cfg.Kubeconfig, "agent": cfg.Agent,
		"cert": cfg.Cert, "key": cfg.Key, "clientCA": cfg.ClientCA} {
		if v == "" {
			return nil, fmt.Errorf("%s: %q is missing", path, what)
		}
	}
	if len(cfg.Nodes) == 0 {
		return nil, fmt.Errorf("%s: no nodes", path)
	}
	for i := range cfg.Nodes {
		n := &cfg.Nodes[i]
		if n.Name == "" || n.Port <= 0 {
			return nil, fmt.Errorf("%s: node %d needs a name and a port", path, i)
		}
		if n.Address == "" {
			n.Address = "127.0.0.1"
		}
	}
	if cfg.Version == "" {
		cfg.Version = "v0.0.0-raychaos"
	}
	return &cfg, nil
}

// nodeSpec is the Node as registered: Ready from the start (its agent answered before the bed
// started this process; Ping keeps it so), the config's capacity, labels and taints, the
// kubelet's address and port for the API server's exec/logs/port-forward.
func nodeSpec(cfg *config, n nodeConfig) (corev1.Node, error) {
	capacity := corev1.ResourceList{}
	for k, v := range n.Capacity {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return corev1.Node{}, fmt.Errorf("node %s: capacity %s=%q: %w", n.Name, k, v, err)
		}
		capacity[corev1.ResourceName(k)] = q
	}
	labels := map[string]string{
		"kubernetes.io/hostname": n.Name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     runtime.GOARCH,
		"kubernetes.io/role":     "agent",
		"type":                   "virtual-kubelet",
	}
	for k, v := range n.Labels {
		labels[k] = v
	}
	now := metav1.Now()
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg,
			LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: n.Taints},
		Status: corev1.NodeStatus{
			Phase:       corev1.NodeRunning,
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
				cond(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "RouteCreated", "the node agent made the node's network"),
			},
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: n.Address},
				{Type: corev1.NodeHostName, Address: n.Name},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{
				KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(n.Port)},
			},
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion:          cfg.Version,
				OperatingSystem:         "linux",
				Architecture:            runtime.GOARCH,
				ContainerRuntimeVersion: "raychaos-agent://" + cfg.Version,
			},
		},
	}, nil
}

// streamTimeout is the kubelet's default streamingConnectionIdleTimeout (4h). virtual-kubelet's
// port-forward route swaps its idle and creation timeouts, so both are given this value: an idle
// exec or port-forward is not cut after 30 s.
const streamTimeout = 4 * time.Hour

func newNode(ctx context.Context, cfg *config, n nodeConfig, client kubernetes.Interface,
	agent *agentClient) (*nodeutil.Node, error) {
	spec, err := nodeSpec(cfg, n)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	var prov *provider // set when virtual-kubelet builds the provider, before it serves
	newProviderFunc := func(pc nodeutil.ProviderConfig) (nodeutil.Provider, node.NodeProvider, error) {
		prov = newProvider(n.Name, n.Address, agent, pc.Pods)
		return prov, prov, nil
	}
	forward := func(ctx context.Context, ns, pod string, port int32, s io.ReadWriteCloser) error {
		return prov.PortForward(ctx, ns, pod, port, s)
	}
	return nodeutil.NewNode(n.Name, newProviderFunc,
		nodeutil.WithClient(client),
		func(c *nodeutil.NodeConfig) error {
			c.NodeSpec = spec
			c.HTTPListenAddr = net.JoinHostPort(n.Address, strconv.Itoa(n.Port))
			c.Handler = wsPortForward(mux, forward, streamTimeout)
			c.StreamIdleTimeout = streamTimeout
			c.StreamCreationTimeout = streamTimeout
			// the agent resolves env when a container starts (status.podIP exists only then)
			c.SkipDownwardAPIResolution = true
			c.NumWorkers = 4
			return nil
		},
		nodeutil.WithTLSConfig(nodeutil.WithKeyPairFromPath(cfg.Cert, cfg.Key),
			nodeutil.WithCAFromPath(cfg.ClientCA)),
		nodeutil.AttachProviderRoutes(mux),
	)
}

func run(ctx context.Context, cfg *config) error {
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", cfg.Kubeconfig, err)
	}
	rc.UserAgent = "raychaos-kubelet/" + cfg.Version
	rc.QPS, rc.Burst = 50, 100 // every node's status writes share this client
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	agent := newAgentClient(cfg.Agent)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(cfg.Nodes))
	var wg sync.WaitGroup
	for _, n := range cfg.Nodes {
		nd, err := newNode(ctx, cfg, n, client, agent)
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			nctx := log.WithLogger(ctx, log.G(ctx).WithField("node", n.Name))
			if err := nd.Run(nctx); err != nil && !errors.Is(err, context.Canceled) {
				errc <- fmt.Errorf("node %s: %w", n.Name, err)
			}
		}()
		go func() {
			if err := nd.WaitReady(ctx, 0); err == nil {
				log.G(ctx).Infof("node %s ready, kubelet API on https://%s:%d", n.Name, n.Address, n.Port)
			}
		}()
	}
	select {
	case <-ctx.Done():
		wg.Wait()
		return nil
	case err := <-errc:
		cancel() // one node down is the whole kubelet down: the bed sees the process exit
		wg.Wait()
		return err
	}
}

func main() {
	configPath := flag.String("config", "", "the bed's kubelet config (JSON)")
	debug := flag.Bool("debug", false, "log at debug level")
	flag.Parse()
	if *configPath == "" {
		fmt.Fprintln(os.Stderr, "usage: raychaos-kubelet --config FILE")
		os.Exit(2)
	}
	logger := logrus.New()
	logger.SetOutput(os.Stderr)
	if *debug {
		logger.SetLevel(logrus.DebugLevel)
	}
	log.L = logruslogger.FromLogrus(logrus.NewEntry(logger))

	cfg, err := loadConfig(*configPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "raychaos-kubelet:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	names := make([]string, 0, len(cfg.Nodes))
	for _, n := range cfg.Nodes {
		names = append(names, n.Name)
	}
	log.G(ctx).Infof("raychaos-kubelet %s: nodes %v, agent %s", cfg.Version, names, cfg.Agent)
	if err := run(ctx, cfg); err != nil {
		log.G(ctx).WithError(err).Error("raychaos-kubelet stopped")
		os.Exit(1)
	}
}
