//! [`Shared`]: a typed place in the segment that keeps the segment mapped.

use std::sync::Arc;

use super::plain::SharedPlain;
use super::segment::Segment;

/// A reference into the job segment that keeps the segment mapped: what modules hold so that
/// the barrier path is one pointer load, with no bounds arithmetic.
pub struct Shared<T: SharedPlain> {
    ptr: std::ptr::NonNull<T>,
    _seg: Arc<Segment>,
}

impl<T: SharedPlain> Shared<T> {
    /// The `T` at `offset` of `seg`. Panics if it does not fit or is misaligned.
    pub(crate) fn new(seg: &Arc<Segment>, offset: usize) -> Self {
        let r: &T = seg.at(offset);
        Shared { ptr: std::ptr::NonNull::from(r), _seg: seg.clone() }
    }
}

impl<T: SharedPlain> std::ops::Deref for Shared<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: `ptr` was checked in bounds and aligned by `Segment::at` and points into the
        // mapping that `_seg` keeps alive; `T: SharedPlain` is valid for any shared bits.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T: SharedPlain> std::fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Shared({:p})", self.ptr)
    }
}

// SAFETY: the pointee is Sync (SharedPlain: Sync) and the Arc is Send + Sync.
unsafe impl<T: SharedPlain> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T: SharedPlain> Sync for Shared<T> {}
