/// The todo app's web view: the page served at `/`, a pure view client of the event stream at
/// `/events` (docs/PROTOCOL.md). Its files live in `web/` and SwiftPM embeds them in the binary
/// at build time (`resources: [.embedInCode("web")]` in Package.swift), as
/// `PackageResources.<file name with "." and "-" as "_">`.
public enum TodoWeb {
    /// Every file of the page by its URL path, with its content type. A file added to `web/`
    /// is served once it is listed here.
    public static let files: [String: (contentType: String, bytes: [UInt8])] = [
        "/index.html": ("text/html; charset=utf-8", PackageResources.index_html),
        "/app.js": ("text/javascript; charset=utf-8", PackageResources.app_js),
        "/todostream.js": ("text/javascript; charset=utf-8", PackageResources.todostream_js),
        "/style.css": ("text/css; charset=utf-8", PackageResources.style_css),
        "/favicon.svg": ("image/svg+xml", PackageResources.favicon_svg),
    ]
}
