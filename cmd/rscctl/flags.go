package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

const (
	defaultURL      = "http://127.0.0.1:8080"
	defaultUser     = "admin"
	defaultPassword = "password"
)

// globals are the flags every command accepts, before or after its name.
type globals struct {
	url, user, password, token, output string
	// explicitCreds: --user/--password (or their environment variables) were
	// given, so a saved token must not override them.
	explicitCreds bool
}

func newGlobals() globals {
	g := globals{url: defaultURL, user: defaultUser, password: defaultPassword, output: "table"}
	if v := os.Getenv("RSC_URL"); v != "" {
		g.url = v
	}
	if v := os.Getenv("RSC_USER"); v != "" {
		g.user, g.explicitCreds = v, true
	}
	if v := os.Getenv("RSC_PASSWORD"); v != "" {
		g.password, g.explicitCreds = v, true
	}
	g.token = os.Getenv("RSC_TOKEN")
	return g
}

// register adds the global flags to fs; the current values are the defaults, so
// a value given before the command survives registering them again after it.
func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.url, "url", g.url, "coordinator base URL ($RSC_URL)")
	fs.StringVar(&g.user, "user", g.user, "Basic auth user ($RSC_USER)")
	fs.StringVar(&g.password, "password", g.password, "Basic auth password ($RSC_PASSWORD)")
	fs.StringVar(&g.token, "token", g.token, "bearer token ($RSC_TOKEN)")
	fs.StringVar(&g.output, "o", g.output, "output format: table or json")
}

func (g *globals) noteExplicit(fs *flag.FlagSet) {
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "user" || f.Name == "password" {
			g.explicitCreds = true
		}
	})
}

// parseInterspersed parses flags wherever they appear among the positional
// arguments (rscctl scale orders billing 8 --wait); "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos, tail []string
	for i, a := range args {
		if a == "--" {
			args, tail = args[:i], args[i+1:]
			break
		}
	}
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return append(pos, tail...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

var globalNames = map[string]bool{"url": true, "user": true, "password": true, "token": true, "o": true}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		if !globalNames[f.Name] {
			n++
		}
	})
	return n > 0
}

// printFlags prints a command's own flags (the global ones are in the main usage).
func printFlags(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if globalNames[f.Name] {
			return
		}
		name, use := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			use += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(fs.Output(), "%-24s %s\n", line, strings.ReplaceAll(use, "\n", "\n"+strings.Repeat(" ", 25)))
	})
}
