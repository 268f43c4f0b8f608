// Command metrics serves a cache's statistics to Prometheus: it builds a
// kvcache.Cache, registers a promstats.Collector over it, serves /metrics
// with promhttp and drives a synthetic workload (requests sharing system
// prompts and conversation histories) so that the numbers move.
//
//	go run ./examples/metrics [-addr 127.0.0.1:9464] [-requests 300] [-interval 1s] [-once]
//
// It prints the address it serves, then runs the workload: -requests
// requests every -interval until interrupted or, with -once, one round of
// them, after which it scrapes its own /metrics, prints the kvtier_ samples
// and exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvtier/kvtier/promstats"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout)
	if err != nil && !errors.Is(err, flag.ErrHelp) { // -help printed the usage
		fmt.Fprintln(os.Stderr, "metrics:", err)
		stop()
		os.Exit(1)
	}
}

// run parses args, serves /metrics and drives the workload until ctx is
// done (or, with -once, until it has printed one scrape).
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("metrics", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:9464", "address to serve /metrics on (port 0 picks a free one)")
	requests := fs.Int("requests", 300, "requests per round of the workload")
	interval := fs.Duration("interval", time.Second, "time between rounds of the workload")
	once := fs.Bool("once", false, "run one round, print one scrape of /metrics and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *requests < 1 || *interval <= 0 {
		return errors.New("-requests and -interval must be positive")
	}

	c, err := newCache()
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(promstats.NewCollector(c, promstats.Options{
		ConstLabels: prometheus.Labels{"model": c.Layout().Model().Name},
	})); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/metrics"
	if _, err := fmt.Fprintln(stdout, "serving", url); err != nil {
		return err
	}

	w := newWorkload(c, 1)
	if err := w.round(*requests); err != nil {
		return err
	}
	if *once {
		return printScrape(ctx, stdout, url)
	}
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-served:
			return err
		case <-tick.C:
			if err := w.round(*requests); err != nil {
				return err
			}
		}
	}
}

// printScrape gets url and prints its kvtier_ samples.
func printScrape(ctx context.Context, stdout io.Writer, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, "kvtier_") {
			if _, err := io.WriteString(stdout, line); err != nil {
				return err
			}
		}
	}
	return nil
}
