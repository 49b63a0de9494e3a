package main

// The node agent's routes, as raychaos/testbed/node/agent.py serves them on its Unix socket:
//
//	PUT    /pods/{uid}                       {"node": NAME, "pod": POD}  -> 200 {}
//	DELETE /pods/{uid}                       {"grace": SECONDS|null}     -> 200 {} | 404
//	GET    /pods?node=NAME                   -> 200 {"pods": [{uid, namespace, name, gen, status}]}
//	GET    /containers/{uid}/{name}?previous=0|1
//	                                         -> 200 {"pid": PID|null, "log": PATH|"", "env": {...}} | 404
//
// "gen" counts the changes of a pod's status on the agent: a new gen is a status to report.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
)

type agentClient struct {
	http *http.Client
}

func newAgentClient(socket string) *agentClient {
	dial := &net.Dialer{Timeout: 5 * time.Second}
	return &agentClient{http: &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return dialAgent(ctx, dial, socket)
			},
			MaxIdleConnsPerHost: 8,
		},
	}}
}

// dialAgent connects to the agent's socket, waiting while its backlog is full: a Unix socket
// refuses at once (EAGAIN) when the listener is slow to accept, where a TCP one would queue
// the SYN; on a busy box that turned port-forwards to running pods into "no running container".
func dialAgent(ctx context.Context, dial *net.Dialer, socket string) (net.Conn, error) {
	deadline := time.Now().Add(5 * time.Second)
	wait := 10 * time.Millisecond
	for {
		conn, err := dial.DialContext(ctx, "unix", socket)
		if err == nil || !errors.Is(err, syscall.EAGAIN) || time.Now().After(deadline) {
			return conn, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		if wait < 200*time.Millisecond {
			wait *= 2
		}
	}
}

// agentError is an answer other than 200; code 404 means the agent does not have the pod.
type agentError struct {
	code int
	msg  string
}

func (e *agentError) Error() string { return fmt.Sprintf("node agent answered %d: %s", e.code, e.msg) }

func isNotFound(err error) bool {
	ae, ok := err.(*agentError)
	return ok && ae.code == http.StatusNotFound
}

func (a *agentClient) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("node agent unreachable: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(raw, &e)
		return &agentError{code: resp.StatusCode, msg: e.Error}
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// putPod is CreatePod and UpdatePod: the agent keeps the status of a pod it already has.
func (a *agentClient) putPod(ctx context.Context, node string, pod *corev1.Pod) error {
	return a.call(ctx, http.MethodPut, "/pods/"+url.PathEscape(string(pod.UID)),
		map[string]any{"node": node, "pod": pod}, nil)
}

// deletePod asks the agent to stop the pod within grace seconds (nil: the agent's 30).
func (a *agentClient) deletePod(ctx context.Context, uid string, grace *int64) error {
	return a.call(ctx, http.MethodDelete, "/pods/"+url.PathEscape(uid),
		map[string]any{"grace": grace}, nil)
}

type agentPod struct {
	UID       string          `json:"uid"`
	Namespace string          `json:"namespace"`
	Name      string          `json:"name"`
	Gen       int64           `json:"gen"`
	Status    json.RawMessage `json:"status"`
}

func (a *agentClient) pods(ctx context.Context, node string) ([]agentPod, error) {
	var out struct {
		Pods []agentPod `json:"pods"`
	}
	err := a.call(ctx, http.MethodGet, "/pods?node="+url.QueryEscape(node), nil, &out)
	return out.Pods, err
}

type containerInfo struct {
	PID *int              `json:"pid"` // nil: the container is not running (or previous)
	Log string            `json:"log"` // "" when there is no such log
	Env map[string]string `json:"env"`
}

func (a *agentClient) container(ctx context.Context, uid, name string, previous bool) (*containerInfo, error) {
	prev := "0"
	if previous {
		prev = "1"
	}
	var out containerInfo
	err := a.call(ctx, http.MethodGet, "/containers/"+url.PathEscape(uid)+"/"+url.PathEscape(name)+
		"?previous="+prev, nil, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}
