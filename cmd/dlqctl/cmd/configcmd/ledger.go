package configcmd

import "github.com/dlqctl/dlqctl/pkg/ledger"

func ledgerParse(dsn string) (ledger.Engine, string, string, error) { return ledger.ParseDSN(dsn) }
