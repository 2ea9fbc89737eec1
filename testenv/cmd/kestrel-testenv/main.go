// kestrel-testenv runs a real Kubernetes control plane on loopback for Kestrel's tests and
// benchmarks: an embedded etcd, kube-apiserver (token authentication, RBAC, the admission
// plugins a real cluster runs) and, on request, kube-scheduler and kube-controller-manager
// (with only the controllers a test names). It writes a kubeconfig, prints
// one JSON line describing the control plane, then takes commands on standard input (one per
// line) so tests can inject faults. Closing standard input, SIGINT or SIGTERM stops
// everything it started.
//
//	kestrel-testenv up --dir DIR [--bin-dir DIR]
//
// Commands: stop-apiserver, kill-apiserver, start-apiserver, restart-apiserver,
// pause-apiserver, resume-apiserver, compact, start-scheduler [FLAGS...], stop-scheduler,
// start-controller-manager CONTROLLERS [FLAGS...], stop-controller-manager, status, quit.
// Each is answered with one line, "ok ..." or "error ...".
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/embed"
)

// The admission plugins a production API server runs that make sense without a
// controller-manager (ServiceAccount admission needs the token controller, so it stays off).
const admissionPlugins = "NamespaceLifecycle,LimitRanger,Priority,ResourceQuota,RuntimeClass," +
	"DefaultTolerationSeconds,ExtendedResourceToleration,TaintNodesByCondition"

type controlPlane struct {
	dir        string
	binDir     string
	etcd       *embed.Etcd
	etcdURL    string
	apiPort    int
	adminToken string
	logs       *os.File

	mu        sync.Mutex
	apiserver *exec.Cmd
	apiDone   chan struct{}
	scheduler *exec.Cmd
	schedDone chan struct{}
	kcm       *exec.Cmd
	kcmDone   chan struct{}
}

func main() {
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	log.SetPrefix("kestrel-testenv: ")
	if len(os.Args) < 2 || os.Args[1] != "up" {
		fmt.Fprintln(os.Stderr, "usage: kestrel-testenv up --dir DIR [--bin-dir DIR]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	dir := fs.String("dir", "", "working directory for etcd data, certificates, logs and the kubeconfig (created; required)")
	binDir := fs.String("bin-dir", "", "directory holding kube-apiserver, kube-scheduler and kube-controller-manager (default: this program's directory)")
	_ = fs.Parse(os.Args[2:])
	if *dir == "" {
		log.Fatal("--dir is required: a directory for etcd data, certificates and the kubeconfig")
	}
	if *binDir == "" {
		exe, err := os.Executable()
		if err != nil {
			log.Fatalf("finding this program's directory: %v; pass --bin-dir", err)
		}
		*binDir = filepath.Dir(exe)
	}
	for _, b := range []string{"kube-apiserver", "kube-scheduler", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(*binDir, b)); err != nil {
			log.Fatalf("%s not found in %s: build it with `cd testenv && go build -o ../target/testenv/ k8s.io/kubernetes/cmd/%s` or pass --bin-dir", b, *binDir, b)
		}
	}
	cp, err := start(*dir, *binDir)
	if err != nil {
		log.Fatalf("starting the control plane: %v", err)
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	commands := make(chan string)
	go func() {
		scanner := bufio.NewScanner(os.Stdin)
		for scanner.Scan() {
			commands <- strings.TrimSpace(scanner.Text())
		}
		close(commands)
	}()
	for {
		select {
		case s := <-signals:
			log.Printf("%v: stopping", s)
			cp.shutdown()
			return
		case cmd, ok := <-commands:
			if !ok || cmd == "quit" {
				cp.shutdown()
				if ok {
					fmt.Println("ok stopped")
				}
				return
			}
			if cmd == "" {
				continue
			}
			if msg, err := cp.command(cmd); err != nil {
				fmt.Printf("error %s: %v\n", cmd, err)
			} else {
				fmt.Printf("ok %s\n", msg)
			}
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func start(dir, binDir string) (*controlPlane, error) {
	for _, d := range []string{dir, filepath.Join(dir, "certs"), filepath.Join(dir, "etcd")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	logs, err := os.OpenFile(filepath.Join(dir, "control-plane.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cp := &controlPlane{dir: dir, binDir: binDir, logs: logs, adminToken: randomToken()}
	if err := writeServiceAccountKey(dir); err != nil {
		return nil, fmt.Errorf("service account key: %w", err)
	}
	// The admin may do anything (system:masters); the scheduler's own identity comes from a
	// ServiceAccount token the tests request.
	tokens := fmt.Sprintf("%s,admin,admin-uid,\"system:masters\"\n", cp.adminToken)
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return nil, err
	}
	if err := cp.startEtcd(); err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	if cp.apiPort, err = freePort(); err != nil {
		return nil, err
	}
	if err := cp.startAPIServer(); err != nil {
		cp.shutdown()
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(cp.kubeconfig()), 0o600); err != nil {
		cp.shutdown()
		return nil, err
	}
	out, _ := json.Marshal(map[string]any{
		"kubeconfig": kubeconfig,
		"server":     cp.server(),
		"token":      cp.adminToken,
		"etcd":       cp.etcdURL,
		"logs":       logs.Name(),
		"pid":        os.Getpid(),
	})
	fmt.Println(string(out))
	return cp, nil
}

func writeServiceAccountKey(dir string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	priv := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	pubDer, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	pub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDer})
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), priv, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pub, 0o600)
}

func (cp *controlPlane) startEtcd() error {
	clientPort, err := freePort()
	if err != nil {
		return err
	}
	peerPort, err := freePort()
	if err != nil {
		return err
	}
	cfg := embed.NewConfig()
	cfg.Name = "kestrel-testenv"
	cfg.Dir = filepath.Join(cp.dir, "etcd")
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{cp.logs.Name()}
	client, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", clientPort))
	peer, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", peerPort))
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		return errors.New("etcd did not become ready within 60 s")
	}
	cp.etcd = e
	cp.etcdURL = client.String()
	return nil
}

func (cp *controlPlane) server() string {
	return fmt.Sprintf("https://127.0.0.1:%d", cp.apiPort)
}

func (cp *controlPlane) kubeconfig() string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: testenv
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: %s
contexts:
- name: testenv
  context:
    cluster: testenv
    user: admin
current-context: testenv
`, cp.server(), cp.adminToken)
}

func (cp *controlPlane) startAPIServer() error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.apiserver != nil {
		return errors.New("kube-apiserver is already running")
	}
	args := []string{
		"--etcd-servers=" + cp.etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// No controller-manager, one API server: no kubernetes Service endpoints to keep.
		"--endpoint-reconciler-type=none",
		fmt.Sprintf("--secure-port=%d", cp.apiPort),
		"--cert-dir=" + filepath.Join(cp.dir, "certs"),
		"--token-auth-file=" + filepath.Join(cp.dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--enable-admission-plugins=" + admissionPlugins,
		"--disable-admission-plugins=ServiceAccount",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + filepath.Join(cp.dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(cp.dir, "sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		"--allow-privileged=true",
		// Kubernetes' Workload API (PodGroups pods name in spec.schedulingGroup), beta
		// and off by default in 1.37.
		"--feature-gates=GenericWorkload=true",
		"--runtime-config=scheduling.k8s.io/v1beta1=true",
		"--v=1",
	}
	cmd, done, err := cp.spawn("kube-apiserver", args...)
	if err != nil {
		return err
	}
	cp.apiserver, cp.apiDone = cmd, done
	cp.mu.Unlock()
	err = cp.waitReady("kube-apiserver", cp.server()+"/readyz", done, 120*time.Second)
	cp.mu.Lock()
	return err
}

// spawn starts one of the binaries in binDir, logging into the control plane's log; done
// closes when it exits.
func (cp *controlPlane) spawn(name string, args ...string) (*exec.Cmd, chan struct{}, error) {
	cmd := exec.Command(filepath.Join(cp.binDir, name), args...)
	cmd.Stdout = cp.logs
	cmd.Stderr = cp.logs
	// Dies with this supervisor even if it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting %s: %w", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	return cmd, done, nil
}

// waitReady polls url (a /readyz or /healthz) until it answers ok, or the process exits.
func (cp *controlPlane) waitReady(name, url string, done chan struct{}, timeout time.Duration) error {
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if exited(done) {
			return fmt.Errorf("%s exited while starting; see %s", name, cp.logs.Name())
		}
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+cp.adminToken)
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready within %v; see %s", name, timeout, cp.logs.Name())
}

// exited says whether a process started by spawn has ended (done is nil when none was started).
func exited(done chan struct{}) bool {
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

func stop(cmd *exec.Cmd, done chan struct{}, sig syscall.Signal) {
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

func (cp *controlPlane) stopAPIServer(sig syscall.Signal) error {
	cp.mu.Lock()
	cmd, done := cp.apiserver, cp.apiDone
	cp.apiserver, cp.apiDone = nil, nil
	cp.mu.Unlock()
	if cmd == nil {
		return errors.New("kube-apiserver is not running")
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	stop(cmd, done, sig)
	return nil
}

func (cp *controlPlane) signalAPIServer(sig syscall.Signal) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.apiserver == nil {
		return errors.New("kube-apiserver is not running")
	}
	return cp.apiserver.Process.Signal(sig)
}

// compact compacts etcd to its current revision, so every older resourceVersion is gone.
func (cp *controlPlane) compact() (int64, error) {
	rev := cp.etcd.Server.KV().Rev()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := cp.etcd.Server.Compact(ctx, &pb.CompactionRequest{Revision: rev, Physical: true})
	return rev, err
}

// startScheduler starts kube-scheduler; args are extra flags (e.g. --kube-api-qps=200).
func (cp *controlPlane) startScheduler(extra []string) error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.scheduler != nil {
		return errors.New("kube-scheduler is already running")
	}
	kubeconfig := filepath.Join(cp.dir, "kubeconfig")
	cmd, done, err := cp.spawn("kube-scheduler", append([]string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--v=1",
	}, extra...)...)
	if err != nil {
		return err
	}
	cp.scheduler, cp.schedDone = cmd, done
	return nil
}

func (cp *controlPlane) stopScheduler() error {
	cp.mu.Lock()
	cmd, done := cp.scheduler, cp.schedDone
	cp.scheduler, cp.schedDone = nil, nil
	cp.mu.Unlock()
	if cmd == nil {
		return errors.New("kube-scheduler is not running")
	}
	stop(cmd, done, syscall.SIGTERM)
	return nil
}

// startControllerManager starts kube-controller-manager with only the controllers named
// (controllers is its --controllers value, e.g. resourceclaim-controller) and extra flags. It
// uses the admin kubeconfig for every controller, and returns once it serves /healthz, so a
// misspelt controller or flag fails this command rather than a test's wait.
func (cp *controlPlane) startControllerManager(controllers string, extra []string) error {
	cp.mu.Lock()
	if cp.kcm != nil {
		cp.mu.Unlock()
		return errors.New("kube-controller-manager is already running")
	}
	port, err := freePort()
	if err != nil {
		cp.mu.Unlock()
		return err
	}
	kubeconfig := filepath.Join(cp.dir, "kubeconfig")
	cmd, done, err := cp.spawn("kube-controller-manager", append([]string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		// Token reviews only: this API server has no client CA, so it publishes no
		// extension-apiserver-authentication ConfigMap to look up.
		"--authentication-skip-lookup=true",
		"--controllers=" + controllers,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--v=1",
	}, extra...)...)
	if err != nil {
		cp.mu.Unlock()
		return err
	}
	cp.kcm, cp.kcmDone = cmd, done
	cp.mu.Unlock()
	url := fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
	if err := cp.waitReady("kube-controller-manager", url, done, 60*time.Second); err != nil {
		_ = cp.stopControllerManager()
		return err
	}
	return nil
}

func (cp *controlPlane) stopControllerManager() error {
	cp.mu.Lock()
	cmd, done := cp.kcm, cp.kcmDone
	cp.kcm, cp.kcmDone = nil, nil
	cp.mu.Unlock()
	if cmd == nil {
		return errors.New("kube-controller-manager is not running")
	}
	stop(cmd, done, syscall.SIGTERM)
	return nil
}

func (cp *controlPlane) command(line string) (string, error) {
	words := strings.Fields(line)
	cmd, args := words[0], words[1:]
	switch {
	case cmd == "start-controller-manager" && len(args) == 0:
		return "", errors.New("start-controller-manager takes the controllers to run (a comma list for --controllers), then flags")
	case len(args) > 0 && cmd != "start-scheduler" && cmd != "start-controller-manager":
		return "", fmt.Errorf("%s takes no arguments", cmd)
	}
	switch cmd {
	case "stop-apiserver":
		return "kube-apiserver stopped", cp.stopAPIServer(syscall.SIGTERM)
	case "kill-apiserver":
		return "kube-apiserver killed", cp.stopAPIServer(syscall.SIGKILL)
	case "start-apiserver":
		return "kube-apiserver ready", cp.startAPIServer()
	case "restart-apiserver":
		if err := cp.stopAPIServer(syscall.SIGKILL); err != nil {
			return "", err
		}
		return "kube-apiserver restarted and ready", cp.startAPIServer()
	case "pause-apiserver":
		return "kube-apiserver paused (SIGSTOP)", cp.signalAPIServer(syscall.SIGSTOP)
	case "resume-apiserver":
		return "kube-apiserver resumed (SIGCONT)", cp.signalAPIServer(syscall.SIGCONT)
	case "compact":
		rev, err := cp.compact()
		return fmt.Sprintf("etcd compacted at revision %d", rev), err
	case "start-scheduler":
		return "kube-scheduler started", cp.startScheduler(args)
	case "stop-scheduler":
		return "kube-scheduler stopped", cp.stopScheduler()
	case "start-controller-manager":
		return "kube-controller-manager started (" + args[0] + ")", cp.startControllerManager(args[0], args[1:])
	case "stop-controller-manager":
		return "kube-controller-manager stopped", cp.stopControllerManager()
	case "status":
		cp.mu.Lock()
		defer cp.mu.Unlock()
		// Alive, not merely started: one that died by itself answers false here (and still
		// takes its stop command before it can start again).
		return fmt.Sprintf("apiserver=%v scheduler=%v controller-manager=%v",
			!exited(cp.apiDone), !exited(cp.schedDone), !exited(cp.kcmDone)), nil
	}
	return "", errors.New("unknown command; known: stop-apiserver, kill-apiserver, start-apiserver, restart-apiserver, pause-apiserver, resume-apiserver, compact, start-scheduler, stop-scheduler, start-controller-manager, stop-controller-manager, status, quit")
}

func (cp *controlPlane) shutdown() {
	_ = cp.stopControllerManager()
	_ = cp.stopScheduler()
	_ = cp.stopAPIServer(syscall.SIGTERM)
	if cp.etcd != nil {
		cp.etcd.Close()
	}
	cp.logs.Close()
	// etcd's data is most of the directory and no one reads it after a stop; the logs,
	// certificates and kubeconfig stay for whoever looks into a failed test.
	_ = os.RemoveAll(filepath.Join(cp.dir, "etcd"))
}
