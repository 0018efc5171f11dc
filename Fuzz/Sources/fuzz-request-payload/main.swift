// Fuzzes request payload decoding (TodoWireCodec.decodeRequest) for each of the six requests a
// view may publish. The first input byte picks the request; the rest is the frame.
import TodoApp

private let names = [
    "RequestTodoViewModels",
    "RequestToggleCompleteTodoViewModel",
    "RequestDeleteTodoViewModel",
    "RequestNewTodoDetailViewModel",
    "RequestTodoDetailViewModel",
    "RequestUpdateDetailViewModel",
]

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let name = names[Int(data[0]) % names.count]
    let frame = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    let codec = TodoWireCodec()
    if let event = try? codec.decodeRequest(named: name, frame: frame) {
        // What decodes is a request of the type asked for, and encodes again.
        precondition(event.name == name, "\(name) decoded as \(event.name)")
        _ = codec.encodeBody(event)
    }
    return 0
}
