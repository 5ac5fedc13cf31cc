//! Support code for the burn probes: counting allocator, RSS reader, CSV rows.
pub mod alloc;
pub mod clock;
pub mod csv;
pub mod rss;
