package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// executable is os.Executable; tests point it elsewhere.
var executable = os.Executable

// replay runs the replay tool (cmd/replay) with args and returns its exit status.
// The binary next to rscctl's own wins over one on PATH, so a release unpacked
// in one directory uses its own matching replay.
func (a *app) replay(ctx context.Context, args []string) int {
	bin, err := findReplay()
	if err != nil {
		fmt.Fprintf(a.stderr, "rscctl replay: %v\n", err)
		return exitNoReplay
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, a.stdout, a.stderr
	err = cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &exitErr) && exitErr.ExitCode() >= 0:
		return exitErr.ExitCode()
	}
	fmt.Fprintf(a.stderr, "rscctl replay: run %s: %v\n", bin, err)
	return exitUnavailable
}

func findReplay() (string, error) {
	name := "replay"
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	var beside string
	if self, err := executable(); err == nil {
		if resolved, err := filepath.EvalSymlinks(self); err == nil {
			self = resolved
		}
		beside = filepath.Join(filepath.Dir(self), name)
		if fi, err := os.Stat(beside); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return beside, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("no replay binary: looked for %s and on PATH; build it with `go build -o <dir> ./cmd/replay` (or `make build`, which puts both in bin/)", beside)
}
