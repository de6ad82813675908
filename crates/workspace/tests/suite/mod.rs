//! One module per area of the workspace layers' tests.

mod credentials;
mod deep_trees;
mod git_reads;
mod layer_attacks;
mod overlay;
mod review_attacks;
mod review_cost;
mod review_record;
mod unprivileged;
