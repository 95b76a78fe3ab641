package decisions

import (
	"github.com/dlqctl/dlqctl/internal/config"
	"github.com/dlqctl/dlqctl/pkg/client"
)

// brokerKey is the broker's identity as the ledger files it: the
// context's broker name, or the URL's identity.
func brokerKey(s *config.Settings) string {
	if s.Broker != "" {
		return s.Broker
	}
	id, err := client.Identity(s.Server)
	if err != nil {
		return s.Server
	}
	return id
}
