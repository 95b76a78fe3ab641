package client

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
)

// Identity is the name the ledger files a broker's history under: one
// per broker however its URL is written. The scheme and host are
// lower-cased, a trailing dot and slash dropped, the default port made
// explicit, credentials, query and fragment removed, and the loopback
// aliases (localhost, 127.0.0.1, ::1) written as localhost. Two brokers
// never share one: a different host, port or path is a different broker
// (127.0.0.2 is not localhost; a host name is not the address it
// resolves to, since DNS may say otherwise tomorrow).
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
		host = ip.String()
		if ip.To4() == nil {
			host = "[" + host + "]"
		}
	}
	switch host {
	case "localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback", "127.0.0.1", "[::1]":
		host = "localhost"
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	return scheme + "://" + host + ":" + port + strings.TrimRight(u.EscapedPath(), "/"), nil
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
