import TodoApp

/// What `TodostreamClient.events` yields: the app's events as the daemon sends them, and the
/// connection's changes that a view must act on.
public enum ClientEvent: Sendable, Hashable {
    /// An app event: a broadcast (with its `seq`) or a reply to one of this client's requests
    /// (without).
    case event(Event, seq: UInt64?)
    /// Broadcasts were missed (`gap`, or the client's own event buffer overflowed): refetch
    /// the list (`RequestTodoViewModels`); broadcasts after `seq` follow.
    case reset(seq: UInt64)
    /// The connection is ready: a new one (`resumed: false`, refetch) or one that resumed
    /// the stream where the last one ended (nothing was missed).
    case connected(resumed: Bool)
    /// The connection was lost; the client reconnects by itself.
    case disconnected
    /// A connection attempt failed before the connection was ready (`reason` in a person's
    /// words: refused, the certificate not trusted, no TLS there, …); the client tries again by
    /// itself, after its backoff.
    case unreachable(reason: String)
    /// A request sent with `send` or `request` failed without a response event: the daemon
    /// refused its frame (`{"op":"error"}`: `error.code` is `rejected`, `error.serverCode`
    /// the daemon's code, e.g. `rate_limited`), or its answer was over `maxFrameBytes`
    /// (`responseTooLarge`). `id` is the one `send` returned; nothing more comes for it.
    /// (`request` also throws the same error.)
    case requestFailed(id: String, error: ClientError)
    /// A broadcast over `maxFrameBytes` was not read (`seq` when it could be told): broadcasts
    /// were missed, and a `.reset` follows. Over WebSocket such a message ends the connection
    /// unread; it is taken for a broadcast when no request was waiting for an answer on the
    /// connection, and the next connection starts a new stream (`connected(resumed: false)`).
    case frameTooLarge(seq: UInt64?)
}
