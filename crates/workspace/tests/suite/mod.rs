//! One module per area of the workspace layers' tests.

mod overlay;
mod review_attacks;
mod unprivileged;
