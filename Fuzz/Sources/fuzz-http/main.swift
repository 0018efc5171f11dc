// Fuzzes the HTTP request path (Relay's HTTPHandler) through an EmbeddedChannel with NIOHTTP1's
// request decoder and response encoder, as on the daemon's HTTP listener. The input is the raw
// byte stream from the client, fed in one write per 128 bytes (several requests on one
// keep-alive connection included).
//
// `/healthz` and `/metrics` are not reached: they answer from a `Task` that hops back with
// `loop.execute`, which an EmbeddedEventLoop does not allow from another thread. A small
// handler in front of HTTPHandler moves those two paths elsewhere (to a 404).
import NIOCore
import NIOEmbedded
import NIOHTTP1
@testable import Relay

final class AsyncRouteGate: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(var head) = unwrapInboundIn(data) {
            let path = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? "/"
            if path == "/healthz" || path == "/metrics" {
                head.uri = "/fuzz" + head.uri
                return context.fireChannelRead(wrapInboundOut(.head(head)))
            }
        }
        context.fireChannelRead(data)
    }
}

private let assets: HTTPAssets = [
    "/index.html": (contentType: "text/html; charset=utf-8", bytes: Array("<!doctype html><title>t</title>".utf8)),
    "/app.js": (contentType: "text/javascript", bytes: Array("console.log(1)".utf8)),
]

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let stream = UnsafeBufferPointer(start: data, count: size)
    let channel = EmbeddedChannel()
    let handler = HTTPHandler(
        health: { HealthReport(storageOK: true, connections: 0, seq: 0, epoch: "e") },
        metrics: { "" },
        originAllowed: { headers in headers["Origin"].allSatisfy { $0 == "http://localhost" } },
        assets: assets
    )
    try! channel.pipeline.syncOperations.addHandlers([
        HTTPResponseEncoder(),
        ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .dropBytes)),
        AsyncRouteGate(),
        handler,
    ])
    try! channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()

    var offset = 0
    while offset < stream.count {
        let length = min(stream.count - offset, 128)
        var buffer = channel.allocator.buffer(capacity: length)
        buffer.writeBytes(UnsafeBufferPointer(rebasing: stream[offset..<(offset + length)]))
        offset += length
        do {
            try channel.writeInbound(buffer)
        } catch {
            // A request the HTTP decoder refuses, or a write after `Connection: close`.
            break
        }
    }
    _ = try? channel.finish(acceptAlreadyClosed: true)
    return 0
}
