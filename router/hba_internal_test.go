package router

import (
	"strings"
	"testing"
)

// TestHBAValidation: every bad line is named, by number, in one error.
func TestHBAValidation(t *testing.T) {
	rules, err := parseHBA("hba.conf", `# comment
host      all   all      127.0.0.1/32  scram-sha-256
hostssl   a,b   x        all           md5   # trailing comment
local     all   all                    trust
host      all   all      10.0.0.1      md5
host      all   all      all           password
host      all   all      all           md5   clientcert=verify-full
hots      all   all      all           md5
host      all   all
`)
	if len(rules) != 2 || rules[1].databases[1] != "b" || rules[1].ssl != "ssl" {
		t.Errorf("rules: %+v", rules)
	}
	for _, want := range []string{"hba.conf:4: connection type \"local\"", "hba.conf:5: invalid address", "hba.conf:6: invalid authentication method \"password\"",
		"hba.conf:7: authentication options", "hba.conf:8: invalid connection type", "hba.conf:9: want TYPE"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}
