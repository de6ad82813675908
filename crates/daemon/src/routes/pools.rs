//! The warm pools' state: how many sandboxes of each wait, and how many
//! each aims at (an autoscaled pool follows recent creates).

use axum::extract::State;
use axum::Json;
use std::sync::Arc;

use crate::api::PoolList;
use crate::app::App;
use crate::error::ApiError;

#[utoipa::path(get, path = "/v1/pools", responses((status = 200, body = PoolList)), security(("token" = [])))]
pub async fn list(State(app): State<Arc<App>>) -> Result<Json<PoolList>, ApiError> {
    let pools = super::sandboxes::blocking(move || crate::pools::status(&app)).await?;
    Ok(Json(PoolList { pools }))
}
