// Fuzzes permessage-deflate (Relay's PerMessageDeflate / DeflateCodec). Byte 0 picks the mode:
//   0: inflate the rest as a compressed message (limit from byte 1: 1...4096 bytes),
//   1: deflate the rest and inflate it again, which must give it back,
//   2: negotiate the rest as a Sec-WebSocket-Extensions header.
// One codec serves every input, as one serves every connection of an event loop, so a message
// that leaves zlib in a bad state shows up on the next one.
import NIOCore
import NIOHTTP1
@testable import Relay

private let codec = DeflateCodec()
private let allocator = ByteBufferAllocator()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size >= 2 else { return 0 }
    let rest = UnsafeBufferPointer(start: data + 2, count: size - 2)
    switch data[0] % 3 {
    case 0:
        let maxBytes = 1 + (Int(data[1]) * 16) % 4096
        if case .success(let inflated) = codec.inflate(ByteBuffer(bytes: rest), maxBytes: maxBytes, allocator: allocator) {
            precondition(inflated.readableBytes <= maxBytes, "inflated \(inflated.readableBytes) > \(maxBytes) bytes")
        }
    case 1:
        let message = ByteBuffer(bytes: rest)
        let windowBits = Int32(9 + Int(data[1]) % 7)
        guard let compressed = codec.deflate(message, windowBits: windowBits, allocator: allocator) else { return 0 }
        switch codec.inflate(compressed, maxBytes: max(message.readableBytes, 1), allocator: allocator) {
        case .success(let inflated):
            precondition(inflated == message, "round trip changed the message")
        case .failure(let failure):
            preconditionFailure("round trip failed: \(failure)")
        }
    default:
        var headers = HTTPHeaders()
        headers.add(name: "Sec-WebSocket-Extensions", value: String(decoding: rest, as: UTF8.self))
        if let accepted = PerMessageDeflate.negotiate(headers) {
            precondition((9...15).contains(accepted.serverWindowBits), "window bits \(accepted.serverWindowBits)")
        }
    }
    return 0
}
