//! One module per area of the workspace layers' tests.

mod credentials;
mod overlay;
mod review_attacks;
mod unprivileged;
