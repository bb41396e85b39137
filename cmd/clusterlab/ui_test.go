package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestUIServes: clusterlab ui with no file serves the demo's cluster on the address it
// prints, and stops when its context ends (Ctrl-C), exiting 0.
func TestUIServes(t *testing.T) {
	runCmd(t, "version") // resets the flags
	pr, pw := io.Pipe()
	rootCmd.SetOut(pw)
	rootCmd.SetErr(io.Discard)
	rootCmd.SetArgs([]string{"ui", "--listen", "127.0.0.1:0"})
	ctx, cancel := context.WithCancel(context.Background())
	// cobra hands the root's context to a subcommand only when the subcommand has none,
	// and an earlier run of ui (the bad-input table) left it one: set it there.
	uiCmd, _, err := rootCmd.Find([]string{"ui"})
	if err != nil {
		t.Fatal(err)
	}
	uiCmd.SetContext(ctx)
	defer uiCmd.SetContext(context.Background())
	defer rootCmd.SetContext(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- rootCmd.ExecuteContext(ctx)
		pw.Close()
	}()
	r := bufio.NewReader(pr)
	first, _ := r.ReadString('\n')
	second, err := r.ReadString('\n')
	if err != nil || !strings.Contains(first, "my-service from the Kubernetes Services docs") || !strings.HasPrefix(second, "open http://127.0.0.1:") {
		cancel()
		t.Fatalf("printed %q %q (%v)", first, second, err)
	}
	go io.Copy(io.Discard, r)
	url := strings.Fields(second)[1]
	resp, err := http.Get(url + "api/cluster")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"name": "my-service"`) {
		t.Errorf("%s: %d %.200s", url, resp.StatusCode, b)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("after Ctrl-C: %v", err)
	}
}
