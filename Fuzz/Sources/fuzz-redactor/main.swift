// Fuzzes the monitor redactor (Relay's PayloadRedactor). It runs on the daemon's own frames,
// but those carry what clients wrote (titles, subtitles), so it must hold on any bytes.
// Byte 0 picks the fields to redact; the rest is the frame.
import NIOCore
@testable import Relay

private let fieldSets: [[String]] = [
    ["title"],
    ["title", "subtitle"],
    ["token", "id"],
    ["payload"],
    ["a", ""],
    ["todo", "title", "subtitle", "priority"],
    ["\u{e9}", "x\"y"],
    ["completedAt"],
]
private let redactors = fieldSets.map { PayloadRedactor(fields: $0)! }

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let redactor = redactors[Int(data[0]) % redactors.count]
    let frame = ByteBuffer(bytes: UnsafeBufferPointer(start: data + 1, count: size - 1))
    let output = redactor.redact(frame)
    // Redacting again changes nothing more than the first pass did: the replacement is a
    // string, which holds no field names.
    let again = redactor.redact(output)
    precondition(again == output, "redaction is not idempotent")
    return 0
}
