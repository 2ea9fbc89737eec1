//! The free capacity of one GPU device: `GpuUse`.

use serde::Serialize;

/// Free capacity of one GPU device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GpuUse {
    /// Thousandths of the device still free.
    pub free_milli: u32,
    /// Held whole by one pod (no shares may join).
    pub held_whole: bool,
    /// Pods holding it whole, and thousandths held by shares: counted, not overwritten,
    /// so that a device the API shows held twice (a race the scheduler lost, another
    /// scheduler) stays held until both have let go.
    #[serde(skip)]
    whole_holders: u16,
    #[serde(skip)]
    shared_milli: u32,
    /// The partitions of it held (a bit per [`crate::devices::Partitions::devices`]
    /// entry), and their holders (a claim and the pods that use it): a partition's
    /// thousandths count among the shares once while any holds it.
    #[serde(skip)]
    partitions: u64,
    #[serde(skip)]
    partition_holders: [u8; crate::devices::Partitions::MAX],
}

impl GpuUse {
    /// A device with `free_milli` thousandths free, the rest held by shares (held whole
    /// when none is free).
    pub(crate) fn with_free(free_milli: u32) -> GpuUse {
        let free_milli = free_milli.min(1000);
        GpuUse {
            free_milli,
            held_whole: free_milli == 0,
            whole_holders: u16::from(free_milli == 0),
            shared_milli: if free_milli == 0 {
                0
            } else {
                1000 - free_milli
            },
            partitions: 0,
            partition_holders: [0; crate::devices::Partitions::MAX],
        }
    }

    /// The partitions of the device held (a bit each).
    pub fn partitions_taken(&self) -> u64 {
        self.partitions
    }

    pub(super) fn take_partition(&mut self, partition: u8, milli: u32, take: bool) {
        let bit = 1u64 << partition;
        let holders = &mut self.partition_holders[partition as usize];
        match take {
            true => *holders = holders.saturating_add(1),
            // Not held: nothing to give back.
            false if *holders == 0 => return,
            false => *holders -= 1,
        }
        let held = *holders > 0;
        if held == (self.partitions & bit != 0) {
            return;
        }
        match held {
            true => self.partitions |= bit,
            false => self.partitions &= !bit,
        }
        self.take_shared(milli, held);
    }

    pub(super) fn take_whole(&mut self, take: bool) {
        if take {
            self.whole_holders += 1;
        } else {
            self.whole_holders = self.whole_holders.saturating_sub(1);
        }
        self.settle();
    }

    pub(super) fn take_shared(&mut self, milli: u32, take: bool) {
        if take {
            self.shared_milli += milli;
        } else {
            self.shared_milli = self.shared_milli.saturating_sub(milli);
        }
        self.settle();
    }

    fn settle(&mut self) {
        self.held_whole = self.whole_holders > 0;
        self.free_milli = if self.held_whole {
            0
        } else {
            1000u32.saturating_sub(self.shared_milli)
        };
    }
}
