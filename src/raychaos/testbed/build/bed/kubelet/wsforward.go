package main

// pods/portforward over a WebSocket: the Python kubernetes client (what raychaos forwards the
// dashboard, Serve and the GCS with) speaks v4.channel.k8s.io, and the API server passes such a
// request through to the kubelet unchanged. virtual-kubelet v1.14.1's route hands its WebSocket
// handler an empty V4Options ("only used for websocket connection"), so it opened no channel and
// closed every such connection at once (kubectl's SPDY path worked). This handler serves them
// the way the kubelet does: the ports from the query (port=P, repeated or comma-separated), a
// data and an error channel per port in that order, each opened with the port number as two
// little-endian bytes, the provider's PortForward on the data channel, its error written to the
// error channel. Every other request goes to virtual-kubelet's routes.

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/log"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
)

type forwardFunc func(ctx context.Context, ns, pod string, port int32, stream io.ReadWriteCloser) error

// wsPorts reads the ports of a WebSocket port-forward request, as the kubelet's V4 options do.
func wsPorts(req *http.Request) ([]uint16, error) {
	values := req.URL.Query()["port"]
	if len(values) == 0 {
		return nil, fmt.Errorf("query parameter %q is required", "port")
	}
	var ports []uint16
	for _, v := range values {
		for _, s := range strings.Split(v, ",") {
			p, err := strconv.ParseUint(strings.TrimSpace(s), 10, 16)
			if err != nil || p == 0 {
				return nil, fmt.Errorf("port %q is not a valid port number", s)
			}
			ports = append(ports, uint16(p))
		}
	}
	return ports, nil
}

// wsPortForward wraps next: a WebSocket request to /portForward/{namespace}/{pod}[/{uid}] is
// served here, everything else by next.
func wsPortForward(next http.Handler, forward forwardFunc, idle time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
		if !wsstream.IsWebSocketRequest(req) || len(parts) < 3 || parts[0] != "portForward" {
			next.ServeHTTP(w, req)
			return
		}
		ns, pod := parts[1], parts[2]
		ports, err := wsPorts(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		channels := make([]wsstream.ChannelType, 0, 2*len(ports))
		for range ports {
			channels = append(channels, wsstream.ReadWriteChannel, wsstream.WriteChannel)
		}
		conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
			"": {Binary: true, Channels: channels},
			"v4." + wsstream.ChannelWebSocketProtocol:       {Binary: true, Channels: channels},
			"v4." + wsstream.Base64ChannelWebSocketProtocol: {Binary: false, Channels: channels},
		})
		conn.SetIdleTimeout(idle)
		_, streams, err := conn.Open(w, req)
		if err != nil {
			log.G(req.Context()).Warnf("port-forward to %s/%s: websocket: %v", ns, pod, err)
			return
		}
		defer conn.Close()
		var wg sync.WaitGroup
		for i, port := range ports {
			data, errs := streams[2*i], streams[2*i+1]
			head := make([]byte, 2)
			binary.LittleEndian.PutUint16(head, port)
			if _, err := data.Write(head); err != nil {
				return
			}
			if _, err := errs.Write(head); err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer errs.Close()
				defer data.Close()
				if err := forward(req.Context(), ns, pod, int32(port), data); err != nil {
					msg := fmt.Sprintf("error forwarding port %d to pod %s/%s: %v", port, ns, pod, err)
					log.G(req.Context()).Warn(msg)
					_, _ = errs.Write([]byte(msg))
				}
			}()
		}
		wg.Wait()
	})
}
