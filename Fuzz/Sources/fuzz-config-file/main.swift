// Fuzzes the config file's parser and checker: the daemon's own ConfigFile.swift (a symlink, so
// this is exactly what ships), on top of Yams. Input: byte 0 picks what the rest is: a YAML
// file (even) or environment variables, one NAME=VALUE per line (odd). Any input must end in
// values that passed the checks, or in a ConfigError; nothing else may escape or crash.
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size >= 1 else { return 0 }
    let text = String(decoding: UnsafeBufferPointer(start: data + 1, count: size - 1), as: UTF8.self)
    do {
        let values: ConfigFile.Values
        if data[0] % 2 == 0 {
            values = try ConfigFile.parse(yaml: text, path: "fuzz.yaml")
        } else {
            var environment: [String: String] = [:]
            for line in text.split(separator: "\n") {
                guard let equals = line.firstIndex(of: "=") else { continue }
                environment[String(line[..<equals])] = String(line[line.index(after: equals)...])
            }
            values = try ConfigFile.environmentValues(environment)
        }
        for key in values.keys {
            precondition(ConfigFile.keys[key] != nil, "accepted an unknown key \(key)")
        }
    } catch is ConfigError {
    } catch {
        preconditionFailure("an error that is not a ConfigError: \(type(of: error))")
    }
    return 0
}
