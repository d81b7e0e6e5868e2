package main

import (
	"strings"

	"github.com/globaldns/global/plugin/global/stanza"

	"github.com/coredns/caddy/caddyfile"
)

// pluginConfig is what the checks need of the global plugin's Corefile: its zones, and the options
// the contract names, read as the plugin reads them (package stanza).
type pluginConfig struct{ stanza.Stanza }

// globalConfig reads the global plugin's stanza from the Corefile in text.
func globalConfig(name, text string) (*pluginConfig, error) {
	s, err := stanza.Parse(name, text)
	if err != nil {
		return nil, err
	}
	return &pluginConfig{s}, nil
}

// parseCorefile parses text with CoreDNS's parser.
func parseCorefile(name, text string) ([]caddyfile.ServerBlock, error) {
	return caddyfile.Parse(name, strings.NewReader(text), nil)
}
