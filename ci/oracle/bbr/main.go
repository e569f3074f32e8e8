// extproc-client: one HTTP request through an Envoy ext_proc server, as Envoy's ext_proc
// filter sends it in FULL_DUPLEX_STREAMED body mode (the mode the chart's
// EnvoyExtensionPolicy selects, and GAIE's config/charts/body-based-routing Istio filter):
// the request headers (end_of_stream false), then the body in chunks, the last one with
// end_of_stream. Prints every ProcessingResponse, one protojson object per line, until the
// server has answered the request body. Used by tests/oracle/test_bbr.py to drive the
// body-based router built from its module (ci/oracle/build.sh bbr).
//
//	extproc-client -addr 127.0.0.1:9004 [-tls] -path /v1/chat/completions < body.json
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9004", "ext_proc server address")
	useTLS := flag.Bool("tls", false, "TLS without verification (the server's self-signed certificate)")
	path := flag.String("path", "/v1/chat/completions", "request :path")
	chunk := flag.Int("chunk", 64, "body chunk size in bytes")
	timeout := flag.Duration("timeout", 20*time.Second, "deadline of the exchange")
	flag.Parse()
	body, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err)
	}
	creds := insecure.NewCredentials()
	if *useTLS {
		creds = credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the server's cert is self-signed
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	stream, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx, grpc.WaitForReady(true))
	if err != nil {
		fail(err)
	}
	hdr := func(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, RawValue: []byte(v)} }
	send := func(r *extprocv3.ProcessingRequest) {
		if err := stream.Send(r); err != nil {
			fail(err)
		}
	}
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			hdr(":method", "POST"), hdr(":path", *path), hdr(":authority", "gateway.test"),
			hdr("content-type", "application/json"), hdr("content-length", fmt.Sprint(len(body))),
		}}},
	}})
	for i := 0; i < len(body) || i == 0; i += *chunk {
		end := min(i+*chunk, len(body))
		send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: body[i:end], EndOfStream: end == len(body)},
		}})
	}
	// The router answers the headers (with the mutation) and then the body; an immediate
	// response (a refused body) ends the exchange too.
	for {
		resp, err := stream.Recv()
		if err != nil {
			fail(err)
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			fail(err)
		}
		fmt.Println(string(out))
		if resp.GetImmediateResponse() != nil {
			break
		}
		if b := resp.GetRequestBody(); b != nil && b.GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() {
			break
		}
		if b := resp.GetRequestBody(); b != nil && b.GetResponse().GetBodyMutation().GetStreamedResponse() == nil {
			break
		}
	}
	_ = stream.CloseSend()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "extproc-client:", err)
	os.Exit(1)
}
