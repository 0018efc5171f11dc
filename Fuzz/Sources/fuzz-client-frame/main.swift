// Fuzzes the client-frame parser (Relay's ClientFrame.parse): every NDJSON line or WebSocket
// text message a client sends goes through it.
@testable import Relay

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    if let frame = ClientFrame.parse(bytes)?.frame {
        // A parsed `id` is an integer or a string of 1...64 characters.
        if case .value(.string(let text)) = frame.id {
            precondition((1...64).contains(text.count), "string id of \(text.count) characters")
        }
    }
    return 0
}
