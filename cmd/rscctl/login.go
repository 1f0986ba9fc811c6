package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/rscoord/rsc/wire"
)

// setupLogin: rscctl login (POST /coord/v1/auth/login). With --token the token is
// exchanged for a fresh one; otherwise --user/--password are sent in the body.
func setupLogin(fs *flag.FlagSet, a *app) func(context.Context, []string) error {
	save := fs.Bool("save", false, "store the token in ~/.config/rscctl/token; later calls without credentials use it")
	return func(ctx context.Context, _ []string) error {
		var body any
		if a.g.token == "" {
			body = wire.LoginRequest{Username: a.g.user, Password: a.g.password}
			a.credentials = "user " + a.g.user
		}
		var resp wire.LoginResponse
		data, err := a.send(ctx, http.MethodPost, "/coord/v1/auth/login", body, &resp)
		if err != nil {
			return err
		}
		if resp.AccessToken == "" {
			return &badAnswerError{Path: "/coord/v1/auth/login", Err: fmt.Errorf("no accessToken")}
		}
		if *save {
			path, err := tokenPath()
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				return fmt.Errorf("save token: %w", err)
			}
			if err := os.WriteFile(path, []byte(resp.AccessToken+"\n"), 0o600); err != nil {
				return fmt.Errorf("save token: %w", err)
			}
			fmt.Fprintf(a.stderr, "token saved to %s (expires %s)\n", path, formatTime(resp.ExpiresAt))
		}
		if a.g.output == "json" {
			return printJSON(a.stdout, data)
		}
		// Only the token on stdout, so RSC_TOKEN=$(rscctl login) works.
		fmt.Fprintln(a.stdout, resp.AccessToken)
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
