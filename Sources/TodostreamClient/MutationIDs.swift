/// Makes the client's mutation ids (protocol §10): a random prefix made once per client
/// (16 base-32 characters, 80 random bits) and a counter, `"k3f9…:17"`.
struct MutationIDs: Sendable {
    let prefix: String
    private var counter: UInt64 = 0

    init<R: RandomNumberGenerator>(using generator: inout R) {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz234567")
        var text = ""
        for _ in 0..<16 {
            text.append(alphabet[Int(generator.next(upperBound: UInt8(alphabet.count)))])
        }
        prefix = text
    }

    init() {
        var generator = SystemRandomNumberGenerator()
        self.init(using: &generator)
    }

    mutating func next() -> String {
        counter += 1
        return "\(prefix):\(counter)"
    }
}
