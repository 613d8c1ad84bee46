// gcp-ads: the MCP-over-xDS server most people would write, for meshhub's
// side-by-side benchmark (bench/src/peers.rs, scenario P5).
//
// It serves Envoy ADS (state of the world and delta) from go-control-plane's
// snapshot cache (pkg/cache/v3) and server (pkg/server/v3), every resource an
// istio.mcp.v1alpha1.Resource under the Istio type URL it was requested by.
// One snapshot is shared by every node (a node hash that maps all nodes to
// one key), as a hub that serves one group does.
//
// The resources come from the benchmark: a JSON file written by the
// orchestrator from meshhub's own published bytes, so both servers hold the
// same resources:
//
//	{"types": {"<type URL>": {"version": "<v>", "resources": ["<hex of an encoded Resource>", ...]}}}
//
// Each type keeps the version meshhub gave it, so both servers also send
// the same versions.
//
// Control protocol: one JSON object per line. On stdout it prints
// {"event":"listening","grpc":ADDR} once serving, {"event":"published",...}
// after each "load", and {"event":"acks",...} answering "acks". On stdin it
// reads {"cmd":"load","file":PATH}, {"cmd":"acks","type":URL,"version":V,
// "peers":N,"timeout_ms":T} and {"cmd":"quit"}.
package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"
	mcp "istio.io/api/mcp/v1alpha1"
)

// The one snapshot key every node maps to.
const group = "default"

// sharedHash maps every node to the one shared snapshot.
type sharedHash struct{}

func (sharedHash) ID(*core.Node) string { return group }

// named gives an MCP resource the name go-control-plane keys it by.
type named struct{ *mcp.Resource }

func (n named) GetName() string { return n.GetMetadata().GetName() }

// snapshot is a ResourceSnapshot over arbitrary type URLs (the cache's own
// Snapshot only knows Envoy's types).
type snapshot struct {
	version   map[string]string
	resources map[string]map[string]types.ResourceWithTTL
	versions  map[string]map[string]string
}

func (s *snapshot) GetVersion(typeURL string) string { return s.version[typeURL] }

func (s *snapshot) GetResourcesAndTTL(typeURL string) map[string]types.ResourceWithTTL {
	return s.resources[typeURL]
}

func (s *snapshot) GetResources(typeURL string) map[string]types.Resource {
	out := make(map[string]types.Resource, len(s.resources[typeURL]))
	for k, v := range s.resources[typeURL] {
		out[k] = v.Resource
	}
	return out
}

func (s *snapshot) ConstructVersionMap() error { return nil }

func (s *snapshot) GetVersionMap(typeURL string) map[string]string { return s.versions[typeURL] }

type input struct {
	Types map[string]struct {
		Version   string   `json:"version"`
		Resources []string `json:"resources"`
	} `json:"types"`
}

func load(path string) (*snapshot, int, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	var in input
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	s := &snapshot{
		version:   map[string]string{},
		resources: map[string]map[string]types.ResourceWithTTL{},
		versions:  map[string]map[string]string{},
	}
	count := 0
	for typeURL, t := range in.Types {
		s.version[typeURL] = t.Version
		rs := make(map[string]types.ResourceWithTTL, len(t.Resources))
		vs := make(map[string]string, len(t.Resources))
		for _, h := range t.Resources {
			b, err := hex.DecodeString(h)
			if err != nil {
				return nil, 0, fmt.Errorf("%s: a %s resource: %w", path, typeURL, err)
			}
			r := &mcp.Resource{}
			if err := proto.Unmarshal(b, r); err != nil {
				return nil, 0, fmt.Errorf("%s: a %s resource: %w", path, typeURL, err)
			}
			n := named{r}
			rs[n.GetName()] = types.ResourceWithTTL{Resource: n}
			vs[n.GetName()] = r.GetMetadata().GetVersion()
			count++
		}
		s.resources[typeURL] = rs
		s.versions[typeURL] = vs
	}
	return s, count, nil
}

// ledger records, per type URL and version, the first send and every ACK.
type ledger struct {
	mu        sync.Mutex
	firstSent map[string]int64
	acks      map[string][]int64
}

func key(typeURL, version string) string { return typeURL + "\x00" + version }

func (l *ledger) sent(typeURL, version string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := key(typeURL, version)
	if _, ok := l.firstSent[k]; !ok {
		l.firstSent[k] = time.Now().UnixNano()
	}
}

func (l *ledger) acked(typeURL, version string) {
	at := time.Now().UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	k := key(typeURL, version)
	l.acks[k] = append(l.acks[k], at)
}

func (l *ledger) get(typeURL, version string) ([]int64, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := key(typeURL, version)
	return append([]int64(nil), l.acks[k]...), l.firstSent[k]
}

var out = struct {
	sync.Mutex
	w *bufio.Writer
}{w: bufio.NewWriter(os.Stdout)}

func emit(v map[string]any) {
	b, _ := json.Marshal(v)
	out.Lock()
	defer out.Unlock()
	out.w.Write(b)
	out.w.WriteByte('\n')
	out.w.Flush()
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "gRPC listen address")
	flag.Parse()

	ctx := context.Background()
	cache := cachev3.NewSnapshotCache(true, sharedHash{}, nil)
	l := &ledger{firstSent: map[string]int64{}, acks: map[string][]int64{}}
	callbacks := serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, req *discovery.DiscoveryRequest) error {
			if req.GetResponseNonce() != "" && req.GetErrorDetail() == nil {
				l.acked(req.GetTypeUrl(), req.GetVersionInfo())
			}
			return nil
		},
		StreamResponseFunc: func(_ context.Context, _ int64, req *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
			l.sent(req.GetTypeUrl(), resp.GetVersionInfo())
		},
	}
	srv := serverv3.NewServer(ctx, cache, callbacks)

	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gcp-ads:", err)
		os.Exit(1)
	}
	// Large messages and many streams per connection, as the benchmark
	// clients use them (the same limits meshhub is run with).
	g := grpc.NewServer(
		grpc.MaxRecvMsgSize(512<<20),
		grpc.MaxSendMsgSize(512<<20),
		grpc.MaxConcurrentStreams(1<<20),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)
	discovery.RegisterAggregatedDiscoveryServiceServer(g, srv)
	go func() {
		if err := g.Serve(lis); err != nil {
			fmt.Fprintln(os.Stderr, "gcp-ads:", err)
			os.Exit(1)
		}
	}()
	emit(map[string]any{"event": "listening", "grpc": lis.Addr().String()})

	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for in.Scan() {
		var cmd map[string]any
		if err := json.Unmarshal(in.Bytes(), &cmd); err != nil {
			emit(map[string]any{"event": "error", "message": err.Error()})
			continue
		}
		switch cmd["cmd"] {
		case "quit":
			g.Stop()
			return
		case "load":
			file, _ := cmd["file"].(string)
			s, n, err := load(file)
			if err != nil {
				emit(map[string]any{"event": "error", "message": err.Error()})
				continue
			}
			// SetSnapshot answers open watches before it returns: publish
			// time is its start.
			at := time.Now().UnixNano()
			if err := cache.SetSnapshot(ctx, group, s); err != nil {
				emit(map[string]any{"event": "error", "message": err.Error()})
				continue
			}
			emit(map[string]any{"event": "published", "objects": n, "at_ns": at})
		case "acks":
			typeURL, _ := cmd["type"].(string)
			version, _ := cmd["version"].(string)
			peers, _ := cmd["peers"].(float64)
			timeout, _ := cmd["timeout_ms"].(float64)
			deadline := time.Now().Add(time.Duration(timeout) * time.Millisecond)
			for {
				acks, first := l.get(typeURL, version)
				done := len(acks) >= int(peers)
				if done || time.Now().After(deadline) {
					emit(map[string]any{"event": "acks", "complete": done, "at_ns": acks, "first_sent_ns": first})
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		default:
			emit(map[string]any{"event": "error", "message": fmt.Sprintf("unknown command %v", cmd["cmd"])})
		}
	}
	g.Stop()
}
