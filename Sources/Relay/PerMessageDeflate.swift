import CompressNIO
import Foundation
import NIOCore
import NIOHTTP1

/// WebSocket permessage-deflate (RFC 7692), without context takeover in either direction.
///
/// Every message is compressed and decompressed on its own, so a connection keeps no zlib
/// state between messages: the deflater and inflater are shared by all connections of one
/// event loop (`DeflateCodec`), and a WebSocket connection costs no more memory with
/// compression than without. Messages shorter than `minimumBytes` go out uncompressed (RSV1
/// clear), which the extension allows per message.
struct PerMessageDeflate: Sendable, Equatable {
    /// The window the daemon compresses with (the client's `server_max_window_bits`, else 15).
    let serverWindowBits: Int32
    /// The header value that accepts the offer.
    let responseHeader: String

    /// Accepts the first `permessage-deflate` offer of the request whose parameters the daemon
    /// can honour, or nil when none can be (then the connection goes uncompressed).
    static func negotiate(_ headers: HTTPHeaders) -> PerMessageDeflate? {
        for value in headers[canonicalForm: "Sec-WebSocket-Extensions"] {
            // canonicalForm already splits the header's comma-separated offers.
            if let accepted = accept(offer: Substring(value)) { return accepted }
        }
        return nil
    }

    private static func accept(offer: Substring) -> PerMessageDeflate? {
        let parts = offer.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        guard parts.first?.lowercased() == "permessage-deflate" else { return nil }
        var serverBits: Int32?
        var seen: Set<String> = []
        for parameter in parts.dropFirst() {
            let pair = parameter.split(separator: "=", maxSplits: 1).map {
                $0.trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: "\""))
            }
            guard let name = pair.first?.lowercased(), seen.insert(name).inserted else { return nil }
            let value = pair.count == 2 ? pair[1] : nil
            switch name {
            case "server_no_context_takeover", "client_no_context_takeover":
                guard value == nil else { return nil }
            case "server_max_window_bits":
                // zlib cannot produce a raw stream with an 8-bit window; decline such offers.
                guard let value, let bits = Int32(value), (9...15).contains(bits) else { return nil }
                serverBits = bits
            case "client_max_window_bits":
                // The daemon inflates with a 32 KiB window, which reads any window the client uses.
                if let value {
                    guard let bits = Int(value), (8...15).contains(bits) else { return nil }
                }
            default:
                return nil
            }
        }
        var header = "permessage-deflate; server_no_context_takeover; client_no_context_takeover"
        if let serverBits { header += "; server_max_window_bits=\(serverBits)" }
        return PerMessageDeflate(serverWindowBits: serverBits ?? 15, responseHeader: header)
    }
}

/// The zlib streams of one event loop, used only on that loop (it is reached through a
/// `NIOLoopBoundBox`).
final class DeflateCodec {
    enum InflateFailure: Error {
        /// The message inflates to more than the allowed size.
        case tooLarge
        /// The message is not a valid raw deflate stream.
        case invalid
    }

    private var deflaters: [Int32: ZlibCompressor] = [:]
    private var inflater: ZlibDecompressor?

    init() {}

    /// One message compressed on its own: a raw deflate stream flushed with a sync marker whose
    /// final four bytes (00 00 ff ff) are dropped, as RFC 7692 §7.2.1 says. Nil if zlib fails,
    /// in which case the message goes out uncompressed.
    func deflate(_ message: ByteBuffer, windowBits: Int32, allocator: ByteBufferAllocator) -> ByteBuffer? {
        guard let deflater = deflater(windowBits: windowBits) else { return nil }
        var input = message
        defer { try? deflater.reset() }
        guard var output = try? input.compressStream(with: deflater, flush: .sync, allocator: allocator),
            output.readableBytes >= 4
        else { return nil }
        output.moveWriterIndex(to: output.writerIndex - 4)
        return output
    }

    /// One compressed message inflated, never past `maxBytes`.
    func inflate(
        _ message: ByteBuffer,
        maxBytes: Int,
        allocator: ByteBufferAllocator
    ) -> Result<
        ByteBuffer, InflateFailure
    > {
        if inflater == nil { inflater = try? ZlibDecompressor(algorithm: .deflate, windowSize: 15) }
        guard let inflater else { return .failure(.invalid) }
        defer { try? inflater.reset() }
        var input = message
        input.writeBytes([0x00, 0x00, 0xFF, 0xFF])
        do {
            // One byte of room past the limit tells "exactly the limit" from "over it".
            let output = try input.decompressStream(with: inflater, maxSize: maxBytes + 1, allocator: allocator)
            return output.readableBytes > maxBytes ? .failure(.tooLarge) : .success(output)
        } catch let error as CompressNIOError where error == .bufferOverflow {
            return .failure(.tooLarge)
        } catch {
            return .failure(.invalid)
        }
    }

    private func deflater(windowBits: Int32) -> ZlibCompressor? {
        if let existing = deflaters[windowBits] { return existing }
        let configuration = ZlibConfiguration(windowSize: windowBits, compressionLevel: 6, memoryLevel: 8)
        guard let made = try? ZlibCompressor(algorithm: .deflate, configuration: configuration) else { return nil }
        deflaters[windowBits] = made
        return made
    }
}

/// One `DeflateCodec` per event loop, made on first use on that loop.
struct DeflateCodecs: Sendable {
    private let boxes: [ObjectIdentifier: NIOLoopBoundBox<DeflateCodec?>]

    init(group: any EventLoopGroup) {
        var boxes: [ObjectIdentifier: NIOLoopBoundBox<DeflateCodec?>] = [:]
        for loop in group.makeIterator() {
            boxes[ObjectIdentifier(loop)] = .makeEmptyBox(valueType: DeflateCodec.self, eventLoop: loop)
        }
        self.boxes = boxes
    }

    /// The codec of `loop`; call on that loop.
    func codec(on loop: any EventLoop) -> DeflateCodec {
        guard let box = boxes[ObjectIdentifier(loop)] else { return DeflateCodec() }
        if let codec = box.value { return codec }
        let codec = DeflateCodec()
        box.value = codec
        return codec
    }
}
