import NIOCore

/// What a transport hands the session: one frame's bytes, or the news that a frame was
/// refused before it was buffered whole.
enum FrameEvent {
    case frame(ByteBuffer)
    case tooLarge
    case binary
}
