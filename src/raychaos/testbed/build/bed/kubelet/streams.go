package main

// What the kubelet serves the API server besides pods: container logs (the agent's log file of
// the container, as its pod worker writes it), exec (nsenter into the container's PID, mount,
// UTS and network namespaces, with the container's env, as runtime.py's Container.exec does),
// and port-forward (a TCP connection made inside the pod's network namespace).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/log"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	utilexec "k8s.io/utils/exec"
)

// podFor is the pod namespace/name on this node: as handed to the agent, else as in the API.
func (p *provider) podFor(ns, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	e := p.entries[key(ns, name)]
	var pod *corev1.Pod
	if e != nil {
		pod = e.pod.DeepCopy()
	}
	p.mu.Unlock()
	if pod != nil {
		return pod, nil
	}
	pod, err := p.pods.Pods(ns).Get(name)
	if err != nil {
		return nil, errdefs.NotFoundf("pod %s/%s is not on node %s", ns, name, p.node)
	}
	return pod, nil
}

func (p *provider) containerInfo(ctx context.Context, ns, pod, container string, previous bool) (*containerInfo, error) {
	obj, err := p.podFor(ns, pod)
	if err != nil {
		return nil, err
	}
	info, err := p.agent.container(ctx, string(obj.UID), container, previous)
	if isNotFound(err) {
		return nil, errdefs.NotFoundf("pod %s/%s has no container %q on node %s", ns, pod, container, p.node)
	}
	return info, err
}

// --- logs ---------------------------------------------------------------------------------------

// GetContainerLogs reads the container's log file. tailLines, limitBytes, previous and follow
// are honoured; the file has no per-line times, so sinceSeconds/sinceTime/timestamps are not.
func (p *provider) GetContainerLogs(ctx context.Context, ns, pod, container string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	info, err := p.containerInfo(ctx, ns, pod, container, opts.Previous)
	if err != nil {
		return nil, err
	}
	if info.Log == "" {
		if opts.Previous {
			return nil, errdefs.InvalidInputf("previous terminated container %q in pod %q not found", container, pod)
		}
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	f, err := os.Open(info.Log)
	if err != nil {
		return nil, err
	}
	if opts.Tail > 0 { // 0 is "not given" in virtual-kubelet's options
		if err := seekTail(f, opts.Tail); err != nil {
			f.Close()
			return nil, err
		}
	}
	var rc io.ReadCloser = f
	if opts.Follow && !opts.Previous && info.PID != nil {
		rc = p.follow(ctx, f, ns, pod, container, info.Log)
	}
	if opts.LimitBytes > 0 {
		rc = &limited{Reader: io.LimitReader(rc, int64(opts.LimitBytes)), Closer: rc}
	}
	return rc, nil
}

type limited struct {
	io.Reader
	io.Closer
}

// seekTail puts f at the start of its last n lines.
func seekTail(f *os.File, n int) error {
	end, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	const chunk = 64 << 10
	pos, lines := end, 0
	buf := make([]byte, chunk)
	for pos > 0 {
		size := int64(chunk)
		if pos < size {
			size = pos
		}
		pos -= size
		if _, err := f.ReadAt(buf[:size], pos); err != nil && err != io.EOF {
			return err
		}
		for i := size - 1; i >= 0; i-- {
			if buf[i] != '\n' || pos+i == end-1 {
				continue // a last line's own newline does not start another line
			}
			lines++
			if lines == n {
				_, err := f.Seek(pos+i+1, io.SeekStart)
				return err
			}
		}
	}
	_, err = f.Seek(0, io.SeekStart)
	return err
}

// follow streams f as it grows, until the request ends or the container stops (the agent no
// longer gives it a PID, or a restart gives it a new log file).
func (p *provider) follow(ctx context.Context, f *os.File, ns, pod, container, path string) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		defer f.Close()
		buf := make([]byte, 32<<10)
		lastCheck := time.Now()
		for {
			n, err := f.Read(buf)
			if n > 0 {
				if _, werr := pw.Write(buf[:n]); werr != nil {
					return
				}
				continue
			}
			if err != nil && err != io.EOF {
				pw.CloseWithError(err)
				return
			}
			select {
			case <-ctx.Done():
				pw.Close()
				return
			case <-time.After(200 * time.Millisecond):
			}
			if time.Since(lastCheck) > time.Second {
				lastCheck = time.Now()
				info, err := p.containerInfo(ctx, ns, pod, container, false)
				if err != nil || info.PID == nil || info.Log != path {
					// drain what the container wrote last, then end
					_, _ = io.CopyBuffer(pw, f, buf)
					pw.Close()
					return
				}
			}
		}
	}()
	return &limited{Reader: pr, Closer: pr}
}

// --- exec ---------------------------------------------------------------------------------------

// RunInContainer runs cmd in the container as runtime.py's Container.exec does: nsenter into
// its PID 1's PID, mount, UTS and network namespaces, in /, with the container's env.
func (p *provider) RunInContainer(ctx context.Context, ns, pod, container string, cmd []string, attach api.AttachIO) error {
	info, err := p.containerInfo(ctx, ns, pod, container, false)
	if err != nil {
		return err
	}
	if info.PID == nil {
		return fmt.Errorf("container %q in pod %s/%s is not running", container, ns, pod)
	}
	if len(cmd) == 0 {
		return errdefs.InvalidInput("no command to run")
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return fmt.Errorf("exec needs nsenter (util-linux): %w", err)
	}
	args := append([]string{"-t", strconv.Itoa(*info.PID), "-m", "-u", "-p", "-n", "--wd=/", "--"}, cmd...)
	c := exec.CommandContext(ctx, nsenter, args...)
	c.Env = envList(info.Env)
	c.WaitDelay = 2 * time.Second // a daemon the command left holding stdout does not hold the exec
	// the client gone: kill nsenter's whole session (its child in the container's PID
	// namespace too), not nsenter alone
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	if attach.TTY() {
		err = runTTY(c, attach)
	} else {
		err = runPipes(c, attach)
	}
	return exitError(err)
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func runPipes(c *exec.Cmd, attach api.AttachIO) error {
	if out := attach.Stdout(); out != nil {
		c.Stdout = out
	}
	if errw := attach.Stderr(); errw != nil {
		c.Stderr = errw
	}
	if in := attach.Stdin(); in != nil {
		w, err := c.StdinPipe() // Wait closes it when the command exits
		if err != nil {
			return err
		}
		go func() {
			_, _ = io.Copy(w, in)
			w.Close()
		}()
	}
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return c.Run()
}

// runTTY gives the command a pseudo-terminal of its own (stdin, stdout and stderr on its slave
// side, its controlling terminal), resized as the client asks.
func runTTY(c *exec.Cmd, attach api.AttachIO) error {
	ptmx, pts, err := openPTY()
	if err != nil {
		return err
	}
	defer ptmx.Close()
	c.Stdin, c.Stdout, c.Stderr = pts, pts, pts
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := c.Start(); err != nil {
		pts.Close()
		return err
	}
	pts.Close() // the command holds it now: reads of ptmx end when the command's side closes
	done := make(chan struct{})
	defer close(done)
	if resize := attach.Resize(); resize != nil {
		go func() {
			for {
				select {
				case s, ok := <-resize:
					if !ok {
						return
					}
					_ = unix.IoctlSetWinsize(int(ptmx.Fd()), unix.TIOCSWINSZ,
						&unix.Winsize{Row: s.Height, Col: s.Width})
				case <-done:
					return
				}
			}
		}()
	}
	if in := attach.Stdin(); in != nil {
		go func() { _, _ = io.Copy(ptmx, in) }()
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		if out := attach.Stdout(); out != nil {
			_, _ = io.Copy(out, ptmx) // ends with EIO once every holder of the slave side is gone
		} else {
			_, _ = io.Copy(io.Discard, ptmx)
		}
	}()
	err = c.Wait()
	select {
	case <-copied:
	case <-time.After(2 * time.Second):
	}
	return err
}

func openPTY() (*os.File, *os.File, error) {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	fd := int(ptmx.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		ptmx.Close()
		return nil, nil, fmt.Errorf("unlocking the pty: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		ptmx.Close()
		return nil, nil, fmt.Errorf("naming the pty: %w", err)
	}
	pts, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		ptmx.Close()
		return nil, nil, err
	}
	return ptmx, pts, nil
}

// exitError is how the API server learns the command's exit code (128+signal when killed).
func exitError(err error) error {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err
	}
	code := ee.ExitCode()
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	return utilexec.CodeExitError{Err: err, Code: code}
}

// AttachToContainer: a container's PID 1 runs with stdin from /dev/null and output to its log
// file, so there is nothing to attach to but the log; attach follows it.
func (p *provider) AttachToContainer(ctx context.Context, ns, pod, container string, attach api.AttachIO) error {
	out := attach.Stdout()
	if out == nil {
		return nil
	}
	rc, err := p.GetContainerLogs(ctx, ns, pod, container, api.ContainerLogOpts{Follow: true})
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(out, rc)
	return err
}

// --- port-forward -------------------------------------------------------------------------------

// PortForward connects to port in the pod's network namespace (localhost first, as the kubelet
// does, then the pod's IP for a server bound to it alone) and copies both ways.
func (p *provider) PortForward(ctx context.Context, ns, pod string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	obj, err := p.podFor(ns, pod)
	if err != nil {
		return err
	}
	pid := 0
	why := "none is running"
	for _, c := range obj.Spec.Containers {
		info, err := p.agent.container(ctx, string(obj.UID), c.Name, false)
		if err == nil && info.PID != nil {
			pid = *info.PID
			break
		}
		if err != nil {
			why = err.Error()
		}
	}
	if pid == 0 {
		return fmt.Errorf("pod %s/%s has no running container on node %s (%s)", ns, pod, p.node, why)
	}
	addrs := []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port)))}
	if st, _ := p.GetPodStatus(ctx, ns, pod); st != nil && st.PodIP != "" {
		addrs = append(addrs, net.JoinHostPort(st.PodIP, strconv.Itoa(int(port))))
	}
	var conn net.Conn
	for _, addr := range addrs {
		if conn, err = dialInNetns(pid, addr); err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("port-forward to %s/%s:%d: %w", ns, pod, port, err)
	}
	defer conn.Close()
	log.G(ctx).Debugf("port-forward to %s/%s:%d via %s", ns, pod, port, conn.RemoteAddr())
	go func() {
		// the client's end of input is the server's: half-close, and keep reading its answer
		_, _ = io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	down := make(chan struct{})
	go func() {
		defer close(down)
		_, _ = io.Copy(stream, conn)
	}()
	select {
	case <-down:
	case <-ctx.Done():
	}
	return nil
}

// dialInNetns makes a TCP connection from inside the network namespace of pid: the socket is
// created on a thread moved into that namespace (setns of a network namespace is allowed to one
// thread of a process), and keeps the namespace it was created in.
func dialInNetns(pid int, addr string) (net.Conn, error) {
	runtime.LockOSThread()
	own, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer own.Close()
	target, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("entering the pod's network namespace: %w", err)
	}
	conn, dialErr := (&net.Dialer{Timeout: 5 * time.Second}).Dial("tcp", addr)
	if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
		// the thread stays locked, so it ends with this goroutine instead of serving others
		// in the wrong namespace
		if conn != nil {
			conn.Close()
		}
		return nil, fmt.Errorf("leaving the pod's network namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return conn, dialErr
}
