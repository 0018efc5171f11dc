// The web frontend, embedded at build time by scripts/embed-web from Web/.
// Do not edit by hand: edit Web/ and run scripts/embed-web.

struct WebAsset: Sendable {
    let contentType: String
    let bytes: [UInt8]
}

enum WebAssets {
    static let files: [String: WebAsset] = [
        "/index.html": WebAsset(
            contentType: "text/html; charset=utf-8",
            bytes: Array("<!doctype html><title>todostream</title><p>todostream</p>\n".utf8)
        )
    ]
}
