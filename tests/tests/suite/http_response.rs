//! `HttpError::from_response`: one call from a failed reqwest response to an error that keeps
//! what classification reads.

use std::time::Duration;

use agent_errors::classify::MAX_ERROR_BODY_BYTES;
use agent_errors::{ErrorKind, HttpError, classify::classify};
use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{address}")
}

#[tokio::test]
async fn a_429_keeps_its_status_body_and_retry_after() {
    let router = Router::new()
        .route(
            "/limited",
            get(|| async {
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    [("retry-after", "7"), ("x-should-retry", "true")],
                    "slow down",
                )
                    .into_response()
            }),
        )
        .route(
            "/huge",
            get(|| async { (StatusCode::BAD_GATEWAY, "x".repeat(100_000)).into_response() }),
        )
        .route("/empty", get(|| async { StatusCode::NOT_FOUND }));
    let base = serve(router).await;
    let client = reqwest::Client::new();

    let response = client.get(format!("{base}/limited")).send().await.unwrap();
    let error = HttpError::from_response(response).await;
    assert_eq!(error.status(), 429);
    assert_eq!(error.message(), "slow down");
    assert_eq!(error.header("Retry-After"), Some("7"));
    assert_eq!(error.header("x-should-retry"), Some("true"));
    let class = classify(&error);
    assert_eq!(class.kind, ErrorKind::Quota);
    assert_eq!(class.retry_after, Some(Duration::from_secs(7)));

    let response = client.get(format!("{base}/huge")).send().await.unwrap();
    let error = HttpError::from_response(response).await;
    assert_eq!(error.status(), 502);
    assert_eq!(error.message().len(), MAX_ERROR_BODY_BYTES);

    let response = client.get(format!("{base}/empty")).send().await.unwrap();
    let error = HttpError::from_response(response).await;
    assert_eq!(error.message(), "Not Found");
    assert_eq!(classify(&error).kind, ErrorKind::NotFound);
}
