//! `iggy-server`: the node of many groups as a process. Built so far: [`translate`], between the
//! Iggy client wire (`iggy-protocol`) and the replicas' requests and replies. The process (tick
//! thread, storage lanes, replica bus, client port) is issue #32's next step.

pub mod translate;
