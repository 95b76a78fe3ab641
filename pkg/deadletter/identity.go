package deadletter

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlqctl/dlqctl/pkg/secret"
)

// Identity is the name the ledger files a broker's history under: one
// per broker however its URL is written. The scheme and host are
// lower-cased, a trailing dot and slash dropped, the port written as the
// number it is (06632 is 6632; the default port made explicit),
// credentials, query and fragment removed, and the loopback aliases
// (localhost, 127.0.0.1, ::1) and the unspecified addresses (0.0.0.0,
// ::, which reach the local host) written as localhost. Two brokers
// never share one: a different host, port or path is a different broker
// (127.0.0.2 is not localhost; a host name is not the address it
// resolves to, since DNS may say otherwise tomorrow: SameAddress says
// what it resolves to now).
func Identity(server string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(server))
	if err != nil || u.Host == "" || u.Opaque != "" {
		return "", fmt.Errorf("invalid server URL %q: want http(s)://host:port", server)
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return "", fmt.Errorf("invalid server URL %q: want http(s)://host:port", server)
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if ip := net.ParseIP(host); ip != nil {
		switch {
		case ip.IsLoopback() && (ip.Equal(net.IPv4(127, 0, 0, 1)) || ip.Equal(net.IPv6loopback)), ip.IsUnspecified():
			host = "localhost"
		case ip.To4() == nil:
			host = "[" + ip.String() + "]"
		default:
			host = ip.String()
		}
	}
	switch host {
	case "localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback":
		host = "localhost"
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("invalid server URL %q: the port must be a number from 1 to 65535", secret.URL(server))
	}
	return scheme + "://" + host + ":" + strconv.Itoa(n) + strings.TrimRight(u.EscapedPath(), "/"), nil
}

// brokerName is what a context may name its broker explicitly.
var brokerName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// NamedIdentity checks an explicit broker name (a context's broker:
// key): letters, digits, dot, dash and underscore, so it can never be
// mistaken for a URL identity.
func NamedIdentity(name string) (string, error) {
	if !brokerName.MatchString(name) {
		return "", fmt.Errorf("invalid broker name %q: use letters, digits, '.', '-' and '_' (at most 64)", name)
	}
	return name, nil
}

// APIPath reports whether a server URL's path names the broker's API
// itself (…/api/v1): dlqctl adds that path, so the URL must stop before it.
func APIPath(server string) bool {
	u, err := url.Parse(strings.TrimSpace(server))
	if err != nil {
		return false
	}
	p := strings.TrimRight(u.Path, "/")
	return strings.HasSuffix(p, "/api/v1") || strings.HasSuffix(p, "/api") || strings.Contains(p, "/api/v1/")
}

// SameAddress reports whether two broker identities reach the same
// address now: their hosts resolve (within a second) to a common
// address, on the same port and scheme. A named identity (a context's
// broker:) reaches nothing by itself.
func SameAddress(ctx context.Context, a, b string) bool {
	ua, ea := url.Parse(a)
	ub, eb := url.Parse(b)
	if ea != nil || eb != nil || ua.Host == "" || ub.Host == "" || ua.Scheme != ub.Scheme || ua.Port() != ub.Port() {
		return false
	}
	ra, rb := lookup(ctx, ua.Hostname()), lookup(ctx, ub.Hostname())
	for _, x := range ra {
		if slices.Contains(rb, x) {
			return true
		}
	}
	return false
}

// lookup is the addresses a host name resolves to now (itself for an
// address; the loopback for localhost), within a second.
func lookup(ctx context.Context, host string) []string {
	if host == "localhost" {
		return []string{"127.0.0.1", "::1"}
	}
	if ip := net.ParseIP(host); ip != nil {
		return []string{ip.String()}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil {
		return nil
	}
	for i, a := range addrs {
		if ip := net.ParseIP(a); ip != nil {
			addrs[i] = ip.String()
		}
	}
	return addrs
}
