package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rscoord/rsc/client"
)

// setupLogin: rscctl login (POST /coord/v1/auth/login). With --token the token is
// exchanged for a fresh one; otherwise --user/--password are sent in the body.
func setupLogin(fs *flag.FlagSet, a *app) func(context.Context, []string) error {
	save := fs.Bool("save", false, "store the token in ~/.config/rscctl/token; later calls without credentials use it")
	return func(ctx context.Context, _ []string) error {
		type login struct {
			token   client.BearerToken
			expires time.Time
		}
		var resp login
		var data []byte
		var err error
		if a.g.token == "" {
			a.credentials = "user " + a.g.user
			resp, data, err = call(ctx, a, func(ctx context.Context) (login, error) {
				tok, exp, err := a.c.Login(ctx, a.g.user, a.g.password)
				return login{tok, exp}, err
			})
		} else {
			// The token buys a fresh one.
			resp, data, err = call(ctx, a, func(ctx context.Context) (login, error) {
				tok, exp, err := a.c.RenewToken(ctx)
				return login{tok, exp}, err
			})
		}
		if err != nil {
			return err
		}
		if resp.token == "" {
			return &badAnswerError{Err: fmt.Errorf("POST /coord/v1/auth/login: no accessToken")}
		}
		if *save {
			path, err := tokenPath()
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				return fmt.Errorf("save token: %w", err)
			}
			if err := os.WriteFile(path, []byte(string(resp.token)+"\n"), 0o600); err != nil {
				return fmt.Errorf("save token: %w", err)
			}
			fmt.Fprintf(a.stderr, "token saved to %s (expires %s)\n", path, formatTime(resp.expires))
		}
		if a.g.output == "json" {
			return printJSON(a.stdout, data)
		}
		// Only the token on stdout, so RSC_TOKEN=$(rscctl login) works.
		fmt.Fprintln(a.stdout, string(resp.token))
		return nil
	}
}

// tokenPath is where login --save keeps the token: $XDG_CONFIG_HOME/rscctl/token,
// else ~/.config/rscctl/token.
func tokenPath() (string, error) {
	if dir := os.Getenv("XDG_CONFIG_HOME"); dir != "" {
		return filepath.Join(dir, "rscctl", "token"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("cannot find the home directory for the saved token: %w", err)
	}
	return filepath.Join(home, ".config", "rscctl", "token"), nil
}

// loadToken reads the saved token, if there is one.
func loadToken() (token, path string, ok bool) {
	path, err := tokenPath()
	if err != nil {
		return "", "", false
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", path, false
	}
	token = strings.TrimSpace(string(data))
	return token, path, token != ""
}
