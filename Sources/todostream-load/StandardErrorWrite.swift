#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

func writeToStandardError(_ bytes: UnsafePointer<UInt8>, _ count: Int) -> Int {
    write(2, bytes, count)
}
