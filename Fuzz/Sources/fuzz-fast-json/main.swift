// Differential fuzzing of the fast frame reader (JSONValue.parse, ClientFrame.init(root:),
// TodoWireCodec.decodeRequest(named:frame:parsed:)) against the JSONDecoder path it stands in
// for: the control fields, and for every request name the event or the error message, must be
// the same whichever way a frame is read.
import EventStream
import TodoApp

@testable import Relay

private let names = Event.Kind.allCases.map(\.rawValue) + ["NoSuchEvent"]
private let codec = TodoWireCodec()

private func outcome(_ decode: () throws(PayloadError) -> Event) -> Result<Event, PayloadError> {
    do {
        return .success(try decode())
    } catch {
        return .failure(error)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let parsed = ClientFrame.parse(bytes)
    let decoded = ClientFrame.decoded(from: bytes)
    precondition(
        parsed?.frame == decoded,
        "fields: \(String(describing: parsed?.frame)) != \(String(describing: decoded))"
    )
    let root = parsed?.root
    for name in names {
        let fast = outcome { () throws(PayloadError) in try codec.decodeRequest(named: name, frame: bytes, parsed: root)
        }
        let slow = outcome { () throws(PayloadError) in try codec.decodeRequest(named: name, frame: bytes) }
        precondition(fast == slow, "\(name): \(fast) != \(slow)")
    }
    return 0
}
