// mcpsink15 is meshhub's test peer for the hub's dial-out role against Istio
// 1.5's own MCP sink: it serves istio.mcp.v1alpha1.ResourceSink with the
// sink server of Istio 1.5 (istio.io/istio/pkg/mcp/sink), the code Istio
// 1.5 shipped for sinks that sources dial, and shows what it holds as JSON.
//
// Istio 1.5 ships no program that serves ResourceSink (its only user is a
// test-framework component), so this small main wires that library up. It
// is built by e2e/peers/istio.sh inside the Istio 1.5 scratch module, never
// committed as a binary.
//
//	mcpsink15 -addr 127.0.0.1:0 -http 127.0.0.1:0 -collections a,b [-reject ns/name]
//
// It prints one line "mcpsink15 grpc=<addr> http=<addr>" when ready.
// GET /state answers {"<collection>": [{"name","version","typeUrl","body"}], ...}
// with bodies as JSON (jsonpb). A change whose resources include the name
// given by -reject is refused (Istio's sink then NACKs the response).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gogo/protobuf/jsonpb"
	"google.golang.org/grpc"

	mcp "istio.io/api/mcp/v1alpha1"
	// Bodies decode only into types linked into the program (gogo's
	// registry), as in Pilot 1.5.
	_ "istio.io/api/networking/v1alpha3"
	_ "istio.io/api/security/v1beta1"
	"istio.io/istio/pkg/mcp/rate"
	"istio.io/istio/pkg/mcp/server"
	"istio.io/istio/pkg/mcp/sink"
	"istio.io/istio/pkg/mcp/testing/monitoring"
)

type item struct {
	Name    string          `json:"name"`
	Version string          `json:"version"`
	TypeURL string          `json:"typeUrl"`
	Body    json.RawMessage `json:"body"`
}

// updater keeps the latest state per collection, as Istio's
// InMemoryUpdater does, and refuses changes that carry -reject.
type updater struct {
	mu     sync.Mutex
	items  map[string][]item
	reject string
}

func (u *updater) Apply(c *sink.Change) error {
	out := make([]item, 0, len(c.Objects))
	m := jsonpb.Marshaler{OrigName: true}
	for _, o := range c.Objects {
		if u.reject != "" && o.Metadata.Name == u.reject {
			return fmt.Errorf("mcpsink15 refuses %s (-reject)", o.Metadata.Name)
		}
		body, err := m.MarshalToString(o.Body)
		if err != nil {
			return fmt.Errorf("%s: body: %v", o.Metadata.Name, err)
		}
		out = append(out, item{Name: o.Metadata.Name, Version: o.Metadata.Version, TypeURL: o.TypeURL, Body: json.RawMessage(body)})
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if c.Incremental {
		byName := map[string]item{}
		for _, it := range u.items[c.Collection] {
			byName[it.Name] = it
		}
		for _, r := range c.Removed {
			delete(byName, r)
		}
		for _, it := range out {
			byName[it.Name] = it
		}
		out = out[:0]
		for _, it := range byName {
			out = append(out, it)
		}
	}
	u.items[c.Collection] = out
	return nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "ResourceSink gRPC address")
	httpAddr := flag.String("http", "127.0.0.1:0", "address of the JSON state endpoint (/state)")
	collections := flag.String("collections", "", "comma-separated collections to accept")
	id := flag.String("id", "mcpsink15", "the sink node id")
	reject := flag.String("reject", "", "refuse changes holding this resource name (ns/name)")
	flag.Parse()
	if *collections == "" {
		fmt.Fprintln(os.Stderr, "mcpsink15: -collections is required")
		os.Exit(2)
	}

	u := &updater{items: map[string][]item{}, reject: *reject}
	options := &sink.Options{
		ID:                *id,
		CollectionOptions: sink.CollectionOptionsFromSlice(strings.Split(*collections, ",")),
		Updater:           u,
		Reporter:          monitoring.NewInMemoryStatsContext(),
	}
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcpsink15:", err)
		os.Exit(1)
	}
	hl, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcpsink15:", err)
		os.Exit(1)
	}
	s := grpc.NewServer()
	mcp.RegisterResourceSinkServer(s, sink.NewServer(options, &sink.ServerOptions{
		AuthChecker: &server.AllowAllChecker{},
		RateLimiter: rate.NewRateLimiter(time.Millisecond, 1000).Create(),
	}))
	mux := http.NewServeMux()
	mux.HandleFunc("/state", func(w http.ResponseWriter, _ *http.Request) {
		u.mu.Lock()
		defer u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(u.items)
	})
	go func() { _ = http.Serve(hl, mux) }()
	fmt.Printf("mcpsink15 grpc=%s http=%s\n", lis.Addr(), hl.Addr())
	if err := s.Serve(lis); err != nil {
		fmt.Fprintln(os.Stderr, "mcpsink15:", err)
		os.Exit(1)
	}
}
