//! The device memory an engine works on, and its doorbell.

use std::sync::Arc;

use barrier_hw::global;

use crate::device::DeviceFile;

pub(crate) fn doorbell(dev: &barrier::mmio::Mmio) -> &barrier::wait::Flag {
    dev.flag(global::DOORBELL.offset)
}

pub(crate) fn bump_doorbell(dev: &barrier::mmio::Mmio) {
    doorbell(dev).bump(true);
}

/// The device memory an engine works on: its own device file (an engine with a thread), or a
/// mapping of another process's device file (an inline engine in a rank). Registers are reached
/// through `mmio` either way (a handle on the same mapping), without a branch per access.
pub(crate) struct Dev {
    pub(crate) mmio: barrier::mmio::Mmio,
    /// The device file this engine serves, when it is the emulator's own.
    pub(crate) own: Option<Arc<DeviceFile>>,
}

impl Dev {
    pub(crate) fn own(file: Arc<DeviceFile>) -> Dev {
        Dev { mmio: file.share(), own: Some(file) }
    }

    pub(crate) fn mapped(mmio: barrier::mmio::Mmio) -> Dev {
        Dev { mmio, own: None }
    }
}

impl std::ops::Deref for Dev {
    type Target = barrier::mmio::Mmio;
    #[inline]
    fn deref(&self) -> &barrier::mmio::Mmio {
        &self.mmio
    }
}
