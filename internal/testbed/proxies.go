package testbed

import (
	"fmt"
	"testing"
	"time"
)

// HAProxy starts haproxy in the foreground with the given configuration
// body (global/defaults sections are prepended: no daemon, no chroot, no
// stats socket, maxconn 9000) and waits until waitAddr accepts
// connections.
func HAProxy(t testing.TB, body, waitAddr string) *Proc {
	return HAProxyMaxconn(t, 9000, body, waitAddr)
}

// HAProxyMaxconn is HAProxy with a global maxconn of n. HAProxy reserves
// about two file descriptors a connection at start and refuses to start
// when RLIMIT_NOFILE is lower, so a test that needs few connections asks
// for few.
func HAProxyMaxconn(t testing.TB, n int, body, waitAddr string) *Proc {
	t.Helper()
	Need(t, "haproxy")
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global
    maxconn %d
defaults
    mode tcp
    timeout connect 5s
    timeout client 1h
    timeout server 1h
`, n) + body
	path := WriteFile(t, dir, "haproxy.cfg", cfg)
	bin, _ := Path("haproxy")
	p := Start(t, bin, "-db", "-f", path)
	WaitTCP(t, waitAddr, 10*time.Second)
	return p
}

// Nginx starts nginx in the foreground with a stream{} block body (and an
// optional http{} body) in its own prefix directory, and waits until
// waitAddr accepts connections.
func Nginx(t testing.TB, streamBody, httpBody, waitAddr string) *Proc {
	t.Helper()
	Need(t, "nginx")
	dir := t.TempDir()
	cfg := `daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile 20000;
pid ` + dir + `/nginx.pid;
error_log stderr info;
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
events { worker_connections 16000; }
stream {
` + streamBody + `
}
`
	if httpBody != "" {
		cfg += "http {\n access_log off;\n client_body_temp_path " + dir + ";\n proxy_temp_path " + dir + ";\n fastcgi_temp_path " + dir + ";\n uwsgi_temp_path " + dir + ";\n scgi_temp_path " + dir + ";\n" + httpBody + "\n}\n"
	}
	path := WriteFile(t, dir, "nginx.conf", cfg)
	bin, _ := Path("nginx")
	p := Start(t, bin, "-p", dir, "-e", "stderr", "-c", path)
	WaitTCP(t, waitAddr, 10*time.Second)
	return p
}
