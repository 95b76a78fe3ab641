package decisions

import "github.com/dlqctl/dlqctl/pkg/client"

// brokerKey is the broker URL as the ledger files it (credentials removed).
func brokerKey(server string) string {
	c, err := client.New(client.Options{Server: server})
	if err != nil {
		return server
	}
	return c.Server()
}
