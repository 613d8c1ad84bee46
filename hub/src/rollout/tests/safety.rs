//! The serving decision's safety under routine operations: pins, restarts
//! without history, standing failures and drops, `resume --cluster`.

use super::*;
